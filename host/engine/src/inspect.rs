//! Reading a policy module without running it: metadata, imports, exports, digest, and the ABI
//! checks the host applies before compiling.

use std::fmt;

use nicpolicy_plugin::abi::{self, Metadata};
use sha2::{Digest, Sha256};
use wasmparser::{Encoding, ExternalKind, FuncType, Parser, Payload, TypeRef, ValType};

use crate::error::LoadError;
use crate::limits::MAX_MODULE_BYTES;

/// How the host sends a request to [`crate::Policy::evaluate`] (`docs/abi.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFormat {
    /// JSON to `nicpolicy_evaluate`: every ABI v1 module takes it.
    Json,
    /// The binary request format, version 1 ([`nicpolicy_plugin::binary`]), to
    /// `nicpolicy_evaluate_binary1`: faster to read for the policy; the decision comes back as
    /// JSON.
    Binary1,
    /// Binary both ways, to `nicpolicy_evaluate_binary2`: the request as in version 1, the
    /// decision in the binary decision format ([`nicpolicy_plugin::binary::decision`]), which
    /// the host checks as it checks JSON. Modules built with the SDK have it.
    Binary2,
    /// As [`RequestFormat::Binary2`], to `nicpolicy_evaluate_binary3`, with the decision in
    /// version 2 of the binary decision format, which carries each NIC's and violation's
    /// source. Modules built with the SDK since sources exist have it.
    Binary3,
}

impl RequestFormat {
    /// The export a module needs to take this format.
    pub fn export(self) -> &'static str {
        match self {
            RequestFormat::Json => abi::EXPORT_EVALUATE,
            RequestFormat::Binary1 => abi::EXPORT_EVALUATE_BINARY1,
            RequestFormat::Binary2 => abi::EXPORT_EVALUATE_BINARY2,
            RequestFormat::Binary3 => abi::EXPORT_EVALUATE_BINARY3,
        }
    }
}

impl std::fmt::Display for RequestFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RequestFormat::Json => "JSON",
            RequestFormat::Binary1 => "binary v1",
            RequestFormat::Binary2 => "binary v2",
            RequestFormat::Binary3 => "binary v3",
        })
    }
}

/// The export every waPC guest has.
const WAPC_GUEST_CALL: &str = "__guest_call";

/// What a policy module declares, read from its bytes alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Hex sha256 of the module bytes (what a config pins).
    pub sha256: String,
    /// Module size in bytes.
    pub size: usize,
    /// The `nicpolicy.metadata` custom section, when present.
    pub metadata: Option<Metadata>,
    /// The bytes of the `io.kubewarden.metadata` custom section of a Kubewarden build, when
    /// present; [`crate::kubewarden::metadata`] reads them.
    pub kubewarden_section: Option<Vec<u8>>,
    /// Every import.
    pub imports: Vec<Item>,
    /// Every export.
    pub exports: Vec<Item>,
    /// How much code the module holds: what compiling it costs.
    pub code: CodeShape,
}

/// The size of a module's code, which bounds the memory and time a compile takes (Cranelift
/// compiles function by function and keeps every compiled function until the module is done).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeShape {
    /// Functions defined by the module (imports excluded).
    pub functions: u64,
    /// Bytes of the code section.
    pub code_bytes: u64,
    /// Bytes of the largest function body.
    pub largest_function_bytes: u64,
    /// Most locals one function declares (parameters excluded).
    pub most_locals: u64,
}

impl CodeShape {
    /// Refuses a module whose code is over one of the [compile bounds](crate::limits::CompileBounds).
    ///
    /// # Errors
    /// [`LoadError::TooComplex`] naming the first bound exceeded.
    pub fn check(&self, bounds: &crate::limits::CompileBounds) -> Result<(), LoadError> {
        let checks = [
            ("functions", self.functions, bounds.max_functions),
            ("bytes of code", self.code_bytes, bounds.max_code_bytes),
            (
                "bytes in its largest function",
                self.largest_function_bytes,
                bounds.max_function_bytes,
            ),
            (
                "locals in one function",
                self.most_locals,
                bounds.max_locals,
            ),
        ];
        for (what, found, limit) in checks {
            if found > limit {
                return Err(LoadError::TooComplex { what, found, limit });
            }
        }
        Ok(())
    }
}

/// One import or export with its type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Import module (empty for exports).
    pub module: String,
    /// Item name.
    pub name: String,
    /// Type, such as `func (i32, i32) -> i64` or `memory`.
    pub ty: ItemType,
}

/// The type of an import or export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemType {
    /// A function with its signature.
    Func {
        /// Parameter types.
        params: Vec<String>,
        /// Result types.
        results: Vec<String>,
    },
    /// A linear memory.
    Memory,
    /// A table.
    Table,
    /// A global.
    Global,
    /// A tag (exception handling).
    Tag,
}

impl fmt::Display for ItemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemType::Func { params, results } => {
                write!(f, "func ({})", params.join(", "))?;
                match results.len() {
                    0 => write!(f, " -> ()"),
                    1 => write!(f, " -> {}", results[0]),
                    _ => write!(f, " -> ({})", results.join(", ")),
                }
            }
            ItemType::Memory => f.write_str("memory"),
            ItemType::Table => f.write_str("table"),
            ItemType::Global => f.write_str("global"),
            ItemType::Tag => f.write_str("tag"),
        }
    }
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn val_name(ty: &ValType) -> String {
    match ty {
        ValType::I32 => "i32".into(),
        ValType::I64 => "i64".into(),
        ValType::F32 => "f32".into(),
        ValType::F64 => "f64".into(),
        ValType::V128 => "v128".into(),
        ValType::Ref(r) => format!("{r}"),
    }
}

fn func_type(ty: &FuncType) -> ItemType {
    ItemType::Func {
        params: ty.params().iter().map(val_name).collect(),
        results: ty.results().iter().map(val_name).collect(),
    }
}

fn invalid(err: wasmparser::BinaryReaderError) -> LoadError {
    LoadError::Invalid(err.to_string())
}

/// What a file that is not Wasm probably is, and how to get the module instead.
fn not_wasm_hint(bytes: &[u8]) -> &'static str {
    let native: [&[u8]; 4] = [
        b"\x7fELF",          // Linux .so or program
        b"!<arch>\n",        // .rlib or .a
        b"MZ",               // Windows .dll or .exe
        b"\xcf\xfa\xed\xfe", // Mach-O .dylib
    ];
    if bytes.trim_ascii_start().starts_with(b"(module") {
        "; this looks like WebAssembly text, compile it with `wasm-tools parse` or `wat2wasm`"
    } else if native.iter().any(|magic| bytes.starts_with(magic)) {
        // The library `cargo build` wrote for this machine, not for wasm32.
        "; this is a native library or program: build the policy crate with `cargo build \
         --target wasm32-unknown-unknown --release` and give \
         target/wasm32-unknown-unknown/release/<crate>.wasm"
    } else {
        ""
    }
}

/// The bytes of a policy module file, read no further than [`MAX_MODULE_BYTES`] (a pipe or a
/// device is not read on without end).
///
/// # Errors
/// [`LoadError::Read`] when it cannot be read, [`LoadError::TooLarge`] when it is over the
/// bound.
pub fn read_module(path: &std::path::Path) -> Result<Vec<u8>, LoadError> {
    use nicpolicy_inputs::files::{read_at_most, BoundedReadError};
    match read_at_most(path, MAX_MODULE_BYTES as u64) {
        Ok(bytes) => Ok(bytes),
        Err(BoundedReadError::Io(error)) => Err(LoadError::Read {
            path: path.to_path_buf(),
            error,
        }),
        Err(BoundedReadError::Over { at_least }) => {
            // A native library is named as one, however large: its first bytes say so.
            if let Ok(head) = read_at_most_head(path) {
                if !head.starts_with(b"\0asm") {
                    return inspect(&head).map(|_| head);
                }
            }
            Err(LoadError::TooLarge {
                size: usize::try_from(at_least).unwrap_or(usize::MAX),
                limit: MAX_MODULE_BYTES,
            })
        }
    }
}

/// Refuses memories the host's limit cannot bound as a whole: a second memory grows beside the
/// limited one, a shared memory outlives the instance, a 64-bit one is not what the ABI's
/// pointers address. A module without a memory is refused later, by its missing export; an
/// imported one by the ABI check, as a forbidden import.
fn check_memories(memories: &[wasmparser::MemoryType]) -> Result<(), LoadError> {
    if memories.len() > 1 {
        return Err(LoadError::Memory(format!(
            "{} linear memories",
            memories.len()
        )));
    }
    if let Some(memory) = memories.first() {
        if memory.memory64 {
            return Err(LoadError::Memory("a 64-bit memory".to_string()));
        }
        if memory.shared {
            return Err(LoadError::Memory("a shared memory".to_string()));
        }
    }
    Ok(())
}

/// The first bytes of a file, enough to tell what it is.
fn read_at_most_head(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)?.take(64).read_to_end(&mut head)?;
    Ok(head)
}

/// Reads a module's metadata, imports and exports. Refuses what is not a core Wasm module.
pub fn inspect(bytes: &[u8]) -> Result<ModuleInfo, LoadError> {
    // The magic first: a native library is named as one, however large.
    if !bytes.starts_with(b"\0asm") {
        let hint = not_wasm_hint(bytes);
        return Err(LoadError::NotWasm(format!(
            "the file does not start with the Wasm magic bytes \\0asm{hint}"
        )));
    }
    if bytes.len() > MAX_MODULE_BYTES {
        return Err(LoadError::TooLarge {
            size: bytes.len(),
            limit: MAX_MODULE_BYTES,
        });
    }
    // Function types by type index; `None` for non-function types.
    let mut types: Vec<Option<ItemType>> = Vec::new();
    // Type index of every function, imported ones first.
    let mut funcs: Vec<u32> = Vec::new();
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut metadata = None;
    let mut kubewarden_section = None;
    let mut raw_exports = Vec::new();
    let mut code = CodeShape::default();
    let mut memories = Vec::new();

    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(invalid)? {
            Payload::Version {
                encoding: Encoding::Component,
                ..
            } => {
                return Err(LoadError::NotWasm(
                    "this is a WebAssembly component; ABI v1 policies are core modules".to_string(),
                ));
            }
            Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.map_err(invalid)?.into_types() {
                        types.push(match &sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => Some(func_type(f)),
                            _ => None,
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(invalid)?;
                    let ty = match import.ty {
                        TypeRef::Func(index) | TypeRef::FuncExact(index) => {
                            funcs.push(index);
                            lookup(&types, index)?
                        }
                        // Refused as a forbidden import by the ABI check, which names it.
                        TypeRef::Memory(_) => ItemType::Memory,
                        TypeRef::Table(_) => ItemType::Table,
                        TypeRef::Global(_) => ItemType::Global,
                        TypeRef::Tag(_) => ItemType::Tag,
                    };
                    imports.push(Item {
                        module: import.module.to_string(),
                        name: import.name.to_string(),
                        ty,
                    });
                }
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    memories.push(memory.map_err(invalid)?);
                }
            }
            Payload::FunctionSection(reader) => {
                for index in reader {
                    funcs.push(index.map_err(invalid)?);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(invalid)?;
                    raw_exports.push((export.name.to_string(), export.kind, export.index));
                }
            }
            Payload::CodeSectionStart { count, size, .. } => {
                code.functions = u64::from(count);
                code.code_bytes = u64::from(size);
            }
            Payload::CodeSectionEntry(body) => {
                let bytes = body.range().len() as u64;
                code.largest_function_bytes = code.largest_function_bytes.max(bytes);
                let mut locals = 0u64;
                for group in body.get_locals_reader().map_err(invalid)? {
                    locals = locals.saturating_add(u64::from(group.map_err(invalid)?.0));
                }
                code.most_locals = code.most_locals.max(locals);
            }
            Payload::CustomSection(section) if section.name() == abi::METADATA_SECTION => {
                let parsed: Metadata = serde_json::from_slice(section.data())
                    .map_err(|err| LoadError::BadMetadata(err.to_string()))?;
                metadata = Some(parsed);
            }
            Payload::CustomSection(section)
                if section.name() == nicpolicy_plugin::kubewarden::METADATA_SECTION =>
            {
                kubewarden_section = Some(section.data().to_vec());
            }
            _ => {}
        }
    }

    check_memories(&memories)?;

    for (name, kind, index) in raw_exports {
        let ty = match kind {
            ExternalKind::Func | ExternalKind::FuncExact => {
                let type_index = funcs.get(index as usize).copied().ok_or_else(|| {
                    LoadError::Invalid(format!("export `{name}` names missing function {index}"))
                })?;
                lookup(&types, type_index)?
            }
            ExternalKind::Memory => ItemType::Memory,
            ExternalKind::Table => ItemType::Table,
            ExternalKind::Global => ItemType::Global,
            ExternalKind::Tag => ItemType::Tag,
        };
        exports.push(Item {
            module: String::new(),
            name,
            ty,
        });
    }

    Ok(ModuleInfo {
        sha256: sha256_hex(bytes),
        size: bytes.len(),
        metadata,
        kubewarden_section,
        imports,
        exports,
        code,
    })
}

fn lookup(types: &[Option<ItemType>], index: u32) -> Result<ItemType, LoadError> {
    types
        .get(index as usize)
        .cloned()
        .flatten()
        .ok_or_else(|| LoadError::Invalid(format!("type {index} is not a function type")))
}

fn func(params: &[&str], results: &[&str]) -> ItemType {
    ItemType::Func {
        params: params.iter().map(|s| s.to_string()).collect(),
        results: results.iter().map(|s| s.to_string()).collect(),
    }
}

/// The exports ABI v1 requires, with their types.
pub fn required_exports() -> [(&'static str, ItemType, &'static str); 5] {
    [
        (abi::EXPORT_MEMORY, ItemType::Memory, "memory"),
        (
            abi::EXPORT_ABI_VERSION,
            func(&[], &["i32"]),
            "func () -> i32",
        ),
        (
            abi::EXPORT_ALLOC,
            func(&["i32"], &["i32"]),
            "func (i32) -> i32",
        ),
        (
            abi::EXPORT_EVALUATE,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
        (
            abi::EXPORT_VALIDATE_SETTINGS,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
    ]
}

/// The exports ABI v1 allows beside the required ones, with their types: a module need not
/// have them, but one that does must give them this type.
pub fn optional_exports() -> [(&'static str, ItemType, &'static str); 5] {
    [
        (
            abi::EXPORT_EVALUATE_BINARY1,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
        (
            abi::EXPORT_EVALUATE_BINARY2,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
        (
            abi::EXPORT_EVALUATE_BINARY3,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
        (
            abi::EXPORT_EVALUATE_BINARY4,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
        (
            abi::EXPORT_BACKSTOP,
            func(&["i32", "i32"], &["i64"]),
            "func (i32, i32) -> i64",
        ),
    ]
}

/// The ABI a module speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleAbi {
    /// nicpolicy's own ABI v1 (`docs/abi.md`); anything that is not waPC is checked as this.
    NicpolicyV1,
    /// Kubewarden's waPC protocol (`docs/kubewarden.md`).
    KubewardenWapc,
}

impl fmt::Display for ModuleAbi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModuleAbi::NicpolicyV1 => "nicpolicy ABI v1",
            ModuleAbi::KubewardenWapc => "Kubewarden waPC (protocol v1)",
        })
    }
}

impl ModuleInfo {
    /// Which ABI the module speaks: waPC when it exports `__guest_call` or carries Kubewarden
    /// metadata, nicpolicy ABI v1 otherwise.
    pub fn abi(&self) -> ModuleAbi {
        if self.exports.iter().any(|e| e.name == WAPC_GUEST_CALL)
            || self.kubewarden_section.is_some()
        {
            ModuleAbi::KubewardenWapc
        } else {
            ModuleAbi::NicpolicyV1
        }
    }

    /// Checks imports, exports and the declared ABI version against ABI v1.
    pub fn check_abi(&self) -> Result<(), LoadError> {
        if self.abi() == ModuleAbi::KubewardenWapc {
            return Err(LoadError::KubewardenModule);
        }
        if let Some(meta) = &self.metadata {
            if meta.abi_version != abi::ABI_VERSION {
                return Err(LoadError::AbiMismatch {
                    found: i64::from(meta.abi_version),
                    expected: abi::ABI_VERSION,
                });
            }
        }
        let log_type = func(&["i32", "i32", "i32"], &[]);
        for import in &self.imports {
            let allowed = import.module == abi::LOG_IMPORT_MODULE
                && import.name == abi::LOG_IMPORT_NAME
                && import.ty == log_type;
            if !allowed {
                return Err(LoadError::ForbiddenImport {
                    module: import.module.clone(),
                    name: import.name.clone(),
                    ty: import.ty.to_string(),
                });
            }
        }
        for (name, ty, expected) in required_exports() {
            match self.exports.iter().find(|e| e.name == name) {
                None => return Err(LoadError::MissingExport { name, expected }),
                Some(found) if found.ty != ty => {
                    return Err(LoadError::ExportType {
                        name,
                        found: found.ty.to_string(),
                        expected,
                    })
                }
                Some(_) => {}
            }
        }
        for (name, ty, expected) in optional_exports() {
            if let Some(found) = self.exports.iter().find(|e| e.name == name && e.ty != ty) {
                return Err(LoadError::ExportType {
                    name,
                    found: found.ty.to_string(),
                    expected,
                });
            }
        }
        Ok(())
    }

    /// The request formats the module takes, oldest first: JSON always, binary v1 when it
    /// exports `nicpolicy_evaluate_binary1`, binary v2 when it exports
    /// `nicpolicy_evaluate_binary2`, binary v3 when it exports `nicpolicy_evaluate_binary3`.
    pub fn request_formats(&self) -> Vec<RequestFormat> {
        let has = |format: &RequestFormat| self.exports.iter().any(|e| e.name == format.export());
        // JSON is the ABI itself: a module without its export fails the ABI check instead.
        std::iter::once(RequestFormat::Json)
            .chain(
                [
                    RequestFormat::Binary1,
                    RequestFormat::Binary2,
                    RequestFormat::Binary3,
                ]
                .into_iter()
                .filter(has),
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> Vec<u8> {
        wat::parse_str(text).expect("valid wat")
    }

    const GOOD: &str = r#"(module
        (import "nicpolicy" "log" (func (param i32 i32 i32)))
        (memory (export "memory") 1)
        (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
        (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
        (func (export "nicpolicy_evaluate") (param i32 i32) (result i64) i64.const 0)
        (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64) i64.const 0)
        (@custom "nicpolicy.metadata" "{\"name\":\"nic-limit\",\"version\":\"1.0.0\",\"abiVersion\":1}")
    )"#;

    #[test]
    fn reads_metadata_imports_and_exports() {
        let info = inspect(&module(GOOD)).unwrap();
        assert_eq!(info.metadata.as_ref().unwrap().name, "nic-limit");
        assert_eq!(info.imports[0].ty.to_string(), "func (i32, i32, i32) -> ()");
        assert_eq!(info.exports.len(), 5);
        assert_eq!(info.sha256.len(), 64);
        info.check_abi().unwrap();
    }

    #[test]
    fn refuses_memories_the_limit_cannot_bound() {
        let two = GOOD.replace(
            r#"(memory (export "memory") 1)"#,
            r#"(memory (export "memory") 1) (memory $scratch 1)"#,
        );
        let imported = GOOD.replace(
            r#"(import "nicpolicy" "log" (func (param i32 i32 i32)))"#,
            r#"(import "nicpolicy" "log" (func (param i32 i32 i32))) (import "env" "m" (memory 1))"#,
        );
        let wide = GOOD.replace(
            r#"(memory (export "memory") 1)"#,
            r#"(memory (export "memory") i64 1)"#,
        );
        let shared = GOOD.replace(
            r#"(memory (export "memory") 1)"#,
            r#"(memory (export "memory") 1 2 shared)"#,
        );
        for (text, want) in [
            (two, "2 linear memories"),
            (wide, "a 64-bit memory"),
            (shared, "a shared memory"),
        ] {
            let err = inspect(&module(&text)).unwrap_err();
            assert!(matches!(err, LoadError::Memory(_)), "{err}");
            assert!(err.to_string().contains(want), "{err}");
        }
        // An imported memory is refused by the ABI check, which names the import.
        let err = inspect(&module(&imported))
            .unwrap()
            .check_abi()
            .unwrap_err();
        assert!(
            matches!(&err, LoadError::ForbiddenImport { module, name, .. } if module == "env" && name == "m"),
            "{err}"
        );
    }

    #[test]
    fn refuses_text_and_garbage() {
        let err = inspect(b"(module)").unwrap_err();
        assert!(err.to_string().contains("WebAssembly text"), "{err}");
        let err = inspect(b"apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(matches!(err, LoadError::NotWasm(_)));
        let err = inspect(b"\0asm\x01\0\0\0\x01\xff").unwrap_err();
        assert!(matches!(err, LoadError::Invalid(_)), "{err}");
    }

    #[test]
    fn refuses_modules_over_the_size_limit() {
        let mut bytes = module(GOOD);
        bytes.resize(MAX_MODULE_BYTES + 1, 0);
        let err = inspect(&bytes).unwrap_err();
        assert!(
            matches!(err, LoadError::TooLarge { size, limit }
                if size == MAX_MODULE_BYTES + 1 && limit == MAX_MODULE_BYTES),
            "{err}"
        );
    }

    #[test]
    fn refuses_wasi_import() {
        let text = GOOD.replace(
            r#"(import "nicpolicy" "log" (func (param i32 i32 i32)))"#,
            r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
        );
        let err = inspect(&module(&text)).unwrap().check_abi().unwrap_err();
        assert!(
            err.to_string().contains("wasi_snapshot_preview1.fd_write"),
            "{err}"
        );
    }

    #[test]
    fn refuses_wrong_export_type_and_missing_export() {
        let text = GOOD.replace(
            r#"(func (export "nicpolicy_evaluate") (param i32 i32) (result i64) i64.const 0)"#,
            r#"(func (export "nicpolicy_evaluate") (param i32 i32) (result i32) i32.const 0)"#,
        );
        let err = inspect(&module(&text)).unwrap().check_abi().unwrap_err();
        assert!(matches!(
            err,
            LoadError::ExportType {
                name: "nicpolicy_evaluate",
                ..
            }
        ));
        let text = GOOD.replace(r#"(export "nicpolicy_alloc")"#, "");
        let err = inspect(&module(&text)).unwrap().check_abi().unwrap_err();
        assert!(matches!(
            err,
            LoadError::MissingExport {
                name: "nicpolicy_alloc",
                ..
            }
        ));
    }

    #[test]
    fn the_binary_exports_are_optional_but_typed() {
        let info = inspect(&module(GOOD)).unwrap();
        assert_eq!(info.request_formats(), [RequestFormat::Json]);
        for (name, format) in [
            ("nicpolicy_evaluate_binary1", RequestFormat::Binary1),
            ("nicpolicy_evaluate_binary2", RequestFormat::Binary2),
            ("nicpolicy_evaluate_binary3", RequestFormat::Binary3),
        ] {
            let with = |ty: &str| {
                GOOD.replace(
                    "(memory",
                    &format!(
                        r#"(func (export "{name}") {ty} unreachable)
  (memory"#
                    ),
                )
            };
            let info = inspect(&module(&with("(param i32 i32) (result i64)"))).unwrap();
            info.check_abi().unwrap();
            assert_eq!(info.request_formats(), [RequestFormat::Json, format]);
            let err = inspect(&module(&with("(param i32 i32) (result i32)")))
                .unwrap()
                .check_abi()
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                LoadError::ExportType {
                    name,
                    found: "func (i32, i32) -> i32".into(),
                    expected: "func (i32, i32) -> i64",
                }
                .to_string()
            );
        }
    }

    #[test]
    fn refuses_other_abi_version_in_metadata() {
        let text = GOOD.replace("\\\"abiVersion\\\":1", "\\\"abiVersion\\\":2");
        let err = inspect(&module(&text)).unwrap().check_abi().unwrap_err();
        assert!(matches!(
            err,
            LoadError::AbiMismatch {
                found: 2,
                expected: 1
            }
        ));
    }
}
