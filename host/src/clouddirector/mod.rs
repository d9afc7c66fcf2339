//! Cloud Director's own view of the site: the org VDC networks, read through its OpenAPI
//! (`/cloudapi/1.0.0/orgVdcNetworks`) and written as the inventory the rest of nicpolicy reads
//! (`nicpolicy inventory import`, docs/schema.md "Inventory").
//!
//! - [`client`]: the HTTP side: the API token exchanged for a bearer token, every call bounded
//!   in time and size, 429 and 503 retried as the server asks, errors named by what failed.
//! - [`import`](mod@import): the org VDCs (or VDC groups) named, their networks read page by page, turned
//!   into inventory networks, sorted; nothing is written unless every page was read.
//! - [`file`](mod@file): the inventory file an import writes, the same bytes for the same site.

pub mod client;
pub mod file;
pub mod import;

pub use client::{Bounds, Client, ClientError};
pub use import::{import, Imported, Owner};
