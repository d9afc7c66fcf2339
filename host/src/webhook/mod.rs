//! The admission webhook behind `nicpolicy serve`: kube-apiserver posts an AdmissionReview for
//! every VCDMachine and VCDMachineTemplate create or update; the served policy chain decides,
//! and the answer is a JSON patch (defaulting) or an allow / deny with field causes
//! (validation).
//!
//! The configuration file, the policies served (one consistent snapshot per review) and their
//! hot reload are [`crate::served`]'s; finding a machine's VCDCluster is [`crate::clusters`]'
//! (files or watch caches). This module is the HTTP adapter over them:
//!
//! - [`review`]: one AdmissionReview in, one out (usable without a server: `nicpolicy review`);
//!   [`admission`] holds the AdmissionReview wire format, [`patch`] the JSON patch of the
//!   mutating endpoint.
//! - [`server`]: HTTPS routes, the bounded evaluation pool, probes, graceful shutdown;
//!   `inline` decides whether a review is evaluated on the async worker or a blocking thread.
//! - [`tls`]: certificate files and their rotation, self-signed certificates.
//! - [`metrics`]: Prometheus metrics.
//! - `warned`: the warnings, metrics and logs of warn-mode policies ([`nicpolicy_engine::mode`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use nicpolicy::clusters::StaticClusters;
//! use nicpolicy::served::ServeConfig;
//! use nicpolicy::webhook::{App, Server};
//! use nicpolicy::{Host, HostConfig};
//!
//! # async fn run() -> anyhow::Result<()> {
//! let config = ServeConfig::read("config/nicpolicy.yaml".as_ref())?;
//! let clusters = StaticClusters::read(&["examples/cluster.yaml".into()])?;
//! let app = Arc::new(App::new(Host::new(HostConfig::default())?, config, Arc::new(clusters))?);
//! let tls = nicpolicy::webhook::tls::SelfSigned::generate(&[])?.rustls(None)?;
//! let listener = std::net::TcpListener::bind("127.0.0.1:9443")?;
//! let server = Server::start(app, listener, tls)?;
//! tokio::signal::ctrl_c().await?;
//! server.shutdown(std::time::Duration::from_secs(30));
//! server.wait().await?;
//! # Ok(())
//! # }
//! # let _ = run;
//! ```

pub mod admission;
pub mod connections;
pub mod decoded;
mod inline;
pub mod metrics;
pub mod patch;
mod prepare;
pub mod review;
pub mod server;
pub mod stage_log;
pub mod tls;
mod warned;

pub use admission::Answer;
pub use patch::NIC_PLAN_ANNOTATION;
pub use review::{Deferred, Endpoint, NativeEvaluator, OnWorker, Reviewer};
pub use server::{App, Server};
