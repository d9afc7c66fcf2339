//! How the long-running commands (`serve`, `controller`) ask the C allocator to give memory back.

/// Blocks of at least this many bytes are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Fixes glibc's mmap threshold at its initial 128 KiB. Left alone, glibc raises the threshold
/// to the size of each mapped block freed (up to 32 MiB), after which blocks that large come
/// from the heap arenas, one per thread, and stay resident once freed. A watch's list page of
/// VCDClusters with megabyte passwords is made of such blocks: with the dynamic threshold, a
/// webhook that listed 150 of them, 10 to a page, peaked at 161-187 MiB; fixed, at 63-67 MiB
/// (the admission e2e, `big_vcdclusters_...`). Reviews and evaluations allocate far less than
/// this per block, so the hot path makes no more system calls. No effect, and not needed, with
/// another C library.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // mallopt has no safe wrapper (rustix has none).
pub fn return_large_frees() {
    // SAFETY: mallopt only changes an allocator parameter; it is called before any thread
    // this process starts, and any value is valid for M_MMAP_THRESHOLD up to 32 MiB.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
    if set != 1 {
        tracing::debug!("mallopt(M_MMAP_THRESHOLD) refused; glibc's dynamic threshold stays");
    }
}

/// See the glibc version: other C libraries do not keep freed large blocks this way.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn return_large_frees() {}
