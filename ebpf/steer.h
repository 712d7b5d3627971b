/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * steer.h - map layouts shared between the XDP steering program
 * (steer.bpf.c) and its Rust loader (datapath/src/steer.rs).
 *
 * Every struct here has a #[repr(C)] mirror in steer.rs with a unit test
 * that pins its size and field offsets; change both together.
 *
 * All addresses and ports are stored as they appear on the wire (network
 * byte order). Padding bytes must be zero: the maps are hashed byte-wise.
 *
 * XSKMAP slot numbering
 * ---------------------
 *   slots [0, ZS_MAX_QUEUES)          catch-all AF_XDP socket of rx queue q
 *                                     lives in slot q. A packet matching
 *                                     the `listen` map goes to slot
 *                                     ctx->rx_queue_index.
 *   slots [ZS_FIRST_FLOW_SLOT, ZS_XSKS_MAX)
 *                                     per-flow sockets; the `flows` map
 *                                     names the slot and the rx queue its
 *                                     socket is bound to.
 * An AF_XDP socket only takes packets of the queue it is bound to. A flow
 * packet that arrives on another queue (RSS moved the flow, or the reply
 * of an outgoing connection hashed elsewhere) goes to the catch-all slot
 * of the queue it arrived on and is counted ZS_CNT_OTHER_QUEUE; userspace
 * hands it to the queue that owns the flow.
 * A matched packet whose slot is empty is dropped and counted in
 * ZS_CNT_NO_SOCKET: the port belongs to zerosplit, so the kernel must not
 * see it (it would answer with a RST).
 */
#ifndef ZEROSPLIT_STEER_H
#define ZEROSPLIT_STEER_H

#include <linux/types.h>

/* Number of XSKMAP entries. */
#define ZS_XSKS_MAX 1024
/* Catch-all slots, one per rx queue: 0 .. ZS_MAX_QUEUES-1. */
#define ZS_MAX_QUEUES 64
/* First per-flow slot. */
#define ZS_FIRST_FLOW_SLOT ZS_MAX_QUEUES
/* Capacity of the flow and listen tables. */
#define ZS_FLOWS_MAX 65536
#define ZS_LISTEN_MAX 1024

/* Key of the `flows` map (16 bytes): the 5-tuple of a received packet. */
struct zs_flow_key {
	__be32 saddr; /* offset 0: IPv4 source (the remote peer) */
	__be32 daddr; /* offset 4: IPv4 destination (our address) */
	__be16 sport; /* offset 8: L4 source port (remote) */
	__be16 dport; /* offset 10: L4 destination port (ours) */
	__u8 proto;   /* offset 12: IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[3];  /* offset 13: must be zero */
};

/* Value of the `flows` map (8 bytes), host byte order. */
struct zs_flow_val {
	__u32 slot;  /* offset 0: XSKMAP slot of the flow's socket */
	__u32 queue; /* offset 4: rx queue that socket is bound to */
};

/* Key of the `listen` map (8 bytes). daddr 0.0.0.0 matches any address. */
struct zs_listen_key {
	__be32 daddr; /* offset 0: IPv4 destination, or 0 for any */
	__be16 dport; /* offset 4: L4 destination port */
	__u8 proto;   /* offset 6: IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;     /* offset 7: must be zero */
};

/* Value of the `listen` map: flags, reserved, must be 0. */

/* Key of the `flows6` map (40 bytes): an IPv6 flow's 5-tuple. */
struct zs_flow6_key {
	__u8 saddr[16]; /* offset 0: IPv6 source (the remote peer) */
	__u8 daddr[16]; /* offset 16: IPv6 destination (our address) */
	__be16 sport;   /* offset 32: L4 source port (remote) */
	__be16 dport;   /* offset 34: L4 destination port (ours) */
	__u8 proto;     /* offset 36: IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[3];    /* offset 37: must be zero */
};
/* Its value is a struct zs_flow_val, as for `flows`. */

/* Key of the `listen6` map (20 bytes). daddr :: matches any address. */
struct zs_listen6_key {
	__u8 daddr[16]; /* offset 0: IPv6 destination, or :: for any */
	__be16 dport;   /* offset 16: L4 destination port */
	__u8 proto;     /* offset 18: IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;       /* offset 19: must be zero */
};

/* Most IPv6 extension headers the program walks to find the ports of a
 * packet that carries them. */
#define ZS_IPV6_EXT_MAX 6

/* Indices of the `counters` PERCPU_ARRAY (values: __u64 packets).
 * Every packet the program sees increments exactly one counter. */
enum zs_counter {
	ZS_CNT_STEERED = 0,   /* redirected into an AF_XDP socket */
	ZS_CNT_PASSED = 1,    /* handed to the kernel stack (XDP_PASS) */
	ZS_CNT_MALFORMED = 2, /* truncated/bad IPv4 headers; passed, counted here only */
	ZS_CNT_NO_SOCKET = 3, /* ours, but the XSKMAP slot is empty: dropped */
	ZS_CNT_OTHER_QUEUE = 4, /* a flow's packet on another queue than its
				 * socket's: redirected to that queue's catch-all */
	ZS_CNT_IP_FRAGMENT = 5, /* a first IPv4 fragment for a flow or listening
				 * port of ours: dropped (we do not reassemble) */
	ZS_CNT_IPV6_EXT = 6, /* an IPv6 packet with extension headers (or a
			      * fragment) for a flow or listening port of
			      * ours: dropped (the datapath does not walk
			      * them; the kernel would answer with a RST) */
	ZS_CNT_MAX = 7,
};

#endif /* ZEROSPLIT_STEER_H */
