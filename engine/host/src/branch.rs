//! The `messages` resource of `subs:agent@0.2.0`: a decision's branch,
//! which the guest reads on demand instead of receiving it whole.
//!
//! The branch is the request's own [`Messages`] (the engine's shared
//! messages, nothing copied), moved into the store's resource table for the
//! decision. Each read converts only the messages it returns. The resource
//! is live only while its decision runs: the store remembers which one is,
//! and a read through any other handle (one kept from an earlier decision
//! of the same instance) is refused with an error, never answered with
//! this decision's data.

use subs_protocol::wit::BranchRequest;
use subs_protocol::{FullTree, Messages};
use wasmtime::component::Resource;

use super::bindings::{branch, wit};
use super::state::StoreState;

/// A decision's branch, as the host holds it behind a `messages` handle.
pub struct Branch {
    messages: Messages,
}

/// What a read through a handle that is not the decision's says.
const STALE: &str = "this messages resource belongs to a decision that is over: read the branch of the decision \
                     being made, from its own request";

impl StoreState {
    /// Puts `messages` in the table as the live branch; the handle to pass
    /// to `decide`.
    pub(crate) fn open_branch(&mut self, messages: Messages) -> wasmtime::Result<Resource<Branch>> {
        let handle = self.table.push(Branch { messages })?;
        self.live_branch = Some(handle.rep());
        Ok(handle)
    }

    /// Ends the live branch's decision: its handle reads nothing more.
    pub(crate) fn close_branch(&mut self) {
        self.live_branch = None;
    }

    /// The branch behind `handle`, if it is the live one.
    fn branch(&self, handle: &Resource<Branch>) -> Result<&Messages, String> {
        if self.live_branch != Some(handle.rep()) {
            return Err(STALE.to_owned());
        }
        self.table.get(handle).map(|b| &b.messages).map_err(|_| STALE.to_owned())
    }
}

/// An index or count as WIT has it (the branch never holds 4 billion
/// messages; saturating keeps the answer defined).
fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn to_wit(messages: Vec<subs_protocol::SharedMessage>) -> Vec<wit::Message> {
    messages.into_iter().map(Into::into).collect()
}

impl branch::Host for StoreState {}

impl branch::HostMessages for StoreState {
    fn len(&mut self, handle: Resource<Branch>) -> Result<u32, String> {
        Ok(u32_of(self.branch(&handle)?.len()))
    }

    fn get(&mut self, handle: Resource<Branch>, index: u32) -> Result<Option<wit::Message>, String> {
        Ok(self.branch(&handle)?.at(index as usize).map(Into::into))
    }

    fn range(&mut self, handle: Resource<Branch>, start: u32, end: u32) -> Result<Vec<wit::Message>, String> {
        Ok(to_wit(self.branch(&handle)?.range(start as usize..end as usize)))
    }

    fn last(&mut self, handle: Resource<Branch>, n: u32) -> Result<Vec<wit::Message>, String> {
        Ok(to_wit(self.branch(&handle)?.last_n(n as usize)))
    }

    fn after(&mut self, handle: Resource<Branch>, id: String) -> Result<Option<Vec<wit::Message>>, String> {
        Ok(self.branch(&handle)?.after(&id).map(to_wit))
    }

    fn position(&mut self, handle: Resource<Branch>, id: String) -> Result<Option<u32>, String> {
        Ok(self.branch(&handle)?.position(&id).map(u32_of))
    }

    fn tree(&mut self, handle: Resource<Branch>) -> Result<wit::MessageTree, String> {
        let tree = self.branch(&handle)?.tree().clone();
        Ok(branch::DecisionRequest::tree_to_wit(tree))
    }

    fn range_json(&mut self, handle: Resource<Branch>, start: u32, end: u32) -> Result<String, String> {
        Ok(subs_protocol::to_json(&self.branch(&handle)?.range(start as usize..end as usize)))
    }

    fn after_json(&mut self, handle: Resource<Branch>, id: String) -> Result<Option<String>, String> {
        Ok(self.branch(&handle)?.after(&id).map(|after| subs_protocol::to_json(&after)))
    }

    fn tree_json(&mut self, handle: Resource<Branch>) -> Result<String, String> {
        let messages = self.branch(&handle)?;
        Ok(subs_protocol::to_json(&FullTree::new(messages.tree(), messages)))
    }

    fn drop(&mut self, handle: Resource<Branch>) -> wasmtime::Result<()> {
        if self.live_branch == Some(handle.rep()) {
            self.live_branch = None;
        }
        self.table.delete(handle)?;
        Ok(())
    }
}
