//! Build script: hands the XDP steering object to `steer.rs`.
//!
//! By default the committed `ebpf/steer.bpf.o` is used as is, so a fresh
//! clone builds without clang. With `ZEROSPLIT_BUILD_EBPF=1` the object is
//! rebuilt from `ebpf/steer.bpf.c` with `ebpf/build.sh` (clang + libbpf-dev)
//! into `OUT_DIR`. Either way the path is exported as
//! `ZEROSPLIT_STEER_OBJ` for `include_bytes!`.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let ebpf = manifest.join("..").join("ebpf");
    let committed = ebpf.join("steer.bpf.o");

    println!("cargo:rerun-if-env-changed=ZEROSPLIT_BUILD_EBPF");
    println!("cargo:rerun-if-changed={}", committed.display());
    for source in ["steer.bpf.c", "steer.h", "build.sh"] {
        println!("cargo:rerun-if-changed={}", ebpf.join(source).display());
    }

    let rebuild = env::var("ZEROSPLIT_BUILD_EBPF").is_ok_and(|v| v == "1");
    let object = if rebuild {
        let out =
            PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("steer.bpf.o");
        let status = Command::new("sh")
            .arg(ebpf.join("build.sh"))
            .arg(&out)
            .status()
            .unwrap_or_else(|e| panic!("ZEROSPLIT_BUILD_EBPF=1: cannot run ebpf/build.sh: {e}"));
        assert!(
            status.success(),
            "ZEROSPLIT_BUILD_EBPF=1: ebpf/build.sh failed ({status}); it needs clang and libbpf-dev"
        );
        out
    } else {
        assert!(
            committed.is_file(),
            "{} is missing: it is committed; restore it or build it with ZEROSPLIT_BUILD_EBPF=1",
            committed.display()
        );
        committed
    };
    println!("cargo:rustc-env=ZEROSPLIT_STEER_OBJ={}", object.display());
}
