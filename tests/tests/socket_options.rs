//! Socket options that need a real interface: busy polling and a UMEM on
//! huge pages. Each test builds its own namespace and veth pair.

use std::fs;

use datapath::{
    config::{BusyPoll, XskConfig},
    raw::XskPort,
};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::require_root;

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// Reserves huge pages for the test and restores the previous count.
struct HugePages(String);

impl HugePages {
    fn reserve(pages: u64) -> HugePages {
        let old = fs::read_to_string(NR_HUGEPAGES).expect("read nr_hugepages");
        let have: u64 = old.trim().parse().expect("nr_hugepages is a number");
        fs::write(NR_HUGEPAGES, (have + pages).to_string()).expect("reserve huge pages");
        HugePages(old.trim().to_string())
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = fs::write(NR_HUGEPAGES, &self.0);
    }
}

#[test]
fn busy_poll_options_and_hugepage_umem_are_accepted() {
    require_root();
    let stack = NetNs::new("zso").expect("netns");
    let peer = NetNs::new("zsq").expect("netns");
    let pair = VethPair::create(&stack, &peer, 1500).expect("veth");
    let _pages = HugePages::reserve(16);
    in_netns(&stack, || {
        let mut cfg = XskConfig {
            busy_poll: Some(BusyPoll {
                usecs: 50,
                budget: 64,
            }),
            ..XskConfig::default()
        };
        cfg.umem.hugepages = true;
        cfg.umem.frame_count = 1024;
        cfg.tx_frames = 256;
        cfg.umem.mr_bytes = 4 << 20;
        let mut port =
            XskPort::open(&pair.a.ifname, 0, &cfg).expect("busy-poll port on huge pages");
        // The MR area is usable memory.
        let mr = port.umem_mut().mr_mut();
        mr[0] = 1;
        let last = mr.len() - 1;
        mr[last] = 2;
        assert_eq!((port.umem().mr()[0], port.umem().mr()[last]), (1, 2));
        let stats = port.stats().expect("XDP_STATISTICS");
        assert_eq!(stats.rx_invalid_descs, 0);
    });
    // Asking for huge pages that are not reserved fails with a clear error.
    in_netns(&stack, || {
        let mut cfg = XskConfig::default();
        cfg.umem.hugepages = true;
        cfg.umem.mr_bytes = 64 << 30;
        let err = XskPort::open(&pair.a.ifname, 0, &cfg)
            .expect_err("64 GiB of huge pages are not reserved");
        assert!(err.to_string().contains("mmap"), "{err}");
    });
}

/// The daemon's UMEM: the MR area is memory slots, each a memfd mapped
/// over its part of the anonymous UMEM mapping. The kernel registers
/// (`XDP_UMEM_REG`, which pins the pages) and binds that mixed mapping,
/// and an application's mapping of a slot's memfd is the UMEM's memory.
#[test]
fn a_umem_of_memfd_memory_slots_is_registered_and_bound() {
    use datapath::{config::MrSlots, shm::SharedMemory};
    require_root();
    let stack = NetNs::new("zsm").expect("netns");
    let peer = NetNs::new("zsn").expect("netns");
    let pair = VethPair::create(&stack, &peer, 1500).expect("veth");
    in_netns(&stack, || {
        let mut cfg = XskConfig::default();
        cfg.umem.frame_count = 1024;
        cfg.tx_frames = 256;
        cfg.umem.mr_slots = Some(MrSlots {
            count: 3,
            len: 1 << 20,
            memory: None,
        });
        let mut port = XskPort::open(&pair.a.ifname, 0, &cfg).expect("port over memory slots");
        assert_eq!(port.umem().mr().len(), 3 << 20);
        let fd = port.umem().mr_slot_fd(2).expect("slot 2");
        let mut app = SharedMemory::open(fd.try_clone_to_owned().expect("dup"), 1 << 20)
            .expect("the application maps its slot");
        port.umem_mut().mr_mut()[(2 << 20) + 7] = 0x5a;
        assert_eq!(app.bytes()[7], 0x5a);
        app.bytes_mut()[0] = 0xa5;
        assert_eq!(port.umem().mr()[2 << 20], 0xa5);
        let stats = port.stats().expect("XDP_STATISTICS");
        assert_eq!(stats.rx_invalid_descs, 0);
    });
}
