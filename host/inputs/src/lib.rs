//! nicpolicy's inputs: Kubernetes manifest files read into policy requests.
//!
//! - [`manifest`]: YAML or JSON files (several documents, `kind: List`) read into the schema's
//!   machines, clusters and inventories, with errors that name the file, the line and column or
//!   the object and field;
//! - [`request`]: a machine's request from files ([`request::build_request`], [`request::RequestFiles`]),
//!   the one `nicpolicy eval`, the case files and the playground evaluate;
//! - [`clusters`]: the one rule that finds a machine's cluster among the objects of the files
//!   ([`clusters::StaticClusters::find`]), which `eval`, `audit`, `test` and the playground
//!   apply, and which the webhook and the controller apply to the API server's objects;
//! - [`files`]: reading a file whole without reading past a size bound.
//!
//! No Wasmtime, no Kubernetes client and no async runtime: the host, its commands and the
//! playground page (compiled to wasm32) use this crate alike.

pub mod clusters;
pub mod files;
pub mod manifest;
pub mod request;
