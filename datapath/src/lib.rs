//! zerosplit's datapath: the software NIC.

pub mod steer;
#[allow(
    unsafe_code,
    reason = "sys/ is the one place for syscalls; every unsafe block there has a SAFETY comment"
)]
pub mod sys;
