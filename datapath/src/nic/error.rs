//! Errors of [`Nic`](super::Nic) operations.

use crate::flow_table::{FlowId, FlowTableError};
use crate::group::GroupError;
use crate::mr::MrError;
use crate::ms::MsError;
use crate::placement::FloorError;
use crate::steer::SteerError;
use crate::tx::TxError;
use crate::xsk::XskError;

/// Errors of [`Nic`] operations.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// Loading, attaching or editing the steering program failed.
    #[error(transparent)]
    Steer(#[from] Box<SteerError>),
    /// An AF_XDP socket operation failed.
    #[error(transparent)]
    Xsk(#[from] XskError),
    /// The flow table refused.
    #[error(transparent)]
    Flow(#[from] FlowTableError),
    /// A memory region operation failed.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// Posting or retiring a segment failed.
    #[error(transparent)]
    Ms(#[from] MsError),
    /// Advancing the placement floor failed.
    #[error(transparent)]
    Floor(#[from] FloorError),
    /// Building a packet failed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The flow id is stale or was never issued.
    #[error("no flow with id {0:?}")]
    UnknownFlow(FlowId),
    /// MR-area bytes to zero are still registered or still read by TX
    /// descriptors.
    #[error("MR area {start}..{end} is {why}")]
    MemoryInUse {
        /// Start of the range.
        start: usize,
        /// End of the range.
        end: usize,
        /// What holds it.
        why: &'static str,
    },
    /// A flow's memory cannot move from one region to the other
    /// ([`Nic::rehome_flow`](super::Nic::rehome_flow)).
    #[error("cannot move a flow's memory from region {from} to region {to}: {why}")]
    BadMove {
        /// The region left.
        from: u32,
        /// The region taken up.
        to: u32,
        /// What is wrong.
        why: &'static str,
    },
    /// A configuration value is impossible.
    #[error("invalid datapath configuration: {0}")]
    Config(String),
}

impl From<GroupError> for NicError {
    fn from(e: GroupError) -> Self {
        match e {
            GroupError::Steer(e) => e.into(),
            e @ GroupError::Queues { .. } => NicError::Config(e.to_string()),
        }
    }
}

impl From<SteerError> for NicError {
    fn from(e: SteerError) -> Self {
        NicError::Steer(Box::new(e))
    }
}
