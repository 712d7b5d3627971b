//! zerosplit's datapath: the software NIC.
