//! What `switchyard remote-serve` hosts for a backend the table marks `served`: burn-remote hosts
//! Burn backends with an IR.

use switchyard_remote::{BackendIr, Serve, Server};

/// A backend that burn-remote can host: the Burn backend its device runs.
pub trait Host {
    /// A server of this backend's device for clients presenting `token`, if one is given.
    fn host(&self, token: Option<&str>) -> Box<dyn Serve>;
}

impl<B: BackendIr, K: switchyard_burn::Kernels<B>> Host for switchyard_burn::Burn<B, K> {
    fn host(&self, token: Option<&str>) -> Box<dyn Serve> {
        Box::new(Server::of(self, token))
    }
}

/// flex's own engine has no IR for burn-remote: a flex server hosts burn-flex, on which the
/// client's lowering runs.
#[cfg(feature = "flex")]
impl Host for switchyard_flex::FlexBackend {
    fn host(&self, token: Option<&str>) -> Box<dyn Serve> {
        Box::new(Server::of(&switchyard_flex::burn_flex(), token))
    }
}
