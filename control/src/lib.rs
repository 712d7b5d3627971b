//! zerosplit control stack: configuration, memory registration, connections and the CLI (being built; today the CLI runs the datapath demo and RX rate measurement).

pub mod config;
