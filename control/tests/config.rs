use zerosplit::config::Config;
#[test]
fn scratch() {
    for t in [
        "[umem]\nframe_sise = 4096\n",
        "[umem]\nframe_size = \"big\"\n",
        "[transport]\nrto_min = \"5 parsecs\"\n",
        "[umem]\nmr_bytes = \"64 mb\"\n",
        "[[listen]]\nport = 7\n[[listen]]\nprot = 9\n",
        "[[listen]]\naddress = \"0.0.0.0\"\n",
        "[interface]\nbusy_poll = { usecs = 5, budgte = 3 }\n",
        "[interface]\nbusy_poll = { usecs = 5 }\n",
        "[transport]\ncongestion = \"vegas\"\n",
        "[transport]\nkeepalive = { idle = \"1s\", interval = \"x\", probes = 3 }\n",
        "[umem\nx=1",
        "bogus = 1\n",
        "[interface]\nqueues = [0, -1]\n",
        "[interface]\nxdp_mode = \"driver\"\n",
        "[threads]\ntransport_core = \"some\"\n",
        "[umem]\nframe_size = 3000\nmtu = 9000\n",
    ] {
        match Config::from_toml_str(t) {
            Ok(_) => println!("OK?? {t:?}"),
            Err(e) => println!("{t:?}\n  => {e}\n  keys {:?}", e.keys()),
        }
    }
    println!("{}", Config::default().to_toml_string().unwrap());
}
