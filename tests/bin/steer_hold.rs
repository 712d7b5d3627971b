//! `zs-steer-hold NETNS IFNAME native|generic`: enters the namespace,
//! attaches the steering program to IFNAME, prints `attached <ifindex>` and
//! sleeps (at most 60 s). Used by the steering crash test, which kills it
//! with SIGKILL and checks that the kernel detached the program.

use std::{
    error::Error,
    io::Write,
    time::{Duration, Instant},
};

use datapath::steer::{Steering, XdpMode};
use zerosplit_lab::NetnsGuard;

const MAX_SLEEP: Duration = Duration::from_secs(60);

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, netns, ifname, mode] = args.as_slice() else {
        return Err("usage: zs-steer-hold NETNS IFNAME native|generic".into());
    };
    let mode = match mode.as_str() {
        "native" => XdpMode::Native,
        "generic" => XdpMode::Generic,
        other => return Err(format!("mode {other:?}: expected native or generic").into()),
    };
    let _ns = NetnsGuard::enter(netns)?;
    let steering = Steering::attach(ifname, mode)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "attached {}", steering.ifindex())?;
    out.flush()?;
    let start = Instant::now();
    while start.elapsed() < MAX_SLEEP {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
