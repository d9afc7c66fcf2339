//! Finding a machine's VCDCluster: the rule and the file-based source live in
//! [`nicpolicy_inputs::clusters`] (no Kubernetes client, shared with the commands and the
//! playground); the API server's source, [`live::KubeClusters`], is here beside the webhook and
//! the controller that need it.

#[cfg(feature = "kubernetes")]
pub mod live;
#[cfg(feature = "kubernetes")]
pub mod versions;

pub use nicpolicy_inputs::clusters::*;
