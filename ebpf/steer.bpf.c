// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * steer.bpf.c - zerosplit's XDP steering program.
 *
 * Parses Ethernet / IPv4 or IPv6 / TCP|UDP and redirects packets of flows
 * that zerosplit owns into AF_XDP sockets through the `xsks` XSKMAP (IPv6:
 * the same steps over `flows6` and `listen6`, `::` for any address):
 *   1. exact 5-tuple in `flows`           -> the slot stored there, if the
 *                                            packet came in on the queue
 *                                            that slot's socket is bound
 *                                            to; else the catch-all slot of
 *                                            the queue it came in on;
 *   2. (daddr, dport, proto) in `listen`   -> slot ctx->rx_queue_index
 *      (then (0.0.0.0, dport, proto))         (the queue's catch-all socket).
 * A match whose slot holds no socket is dropped (counted no_socket), so the
 * kernel never answers for our ports. A first IPv4 fragment (offset 0,
 * more fragments) whose ports match a flow or listen entry is dropped and
 * counted ip_fragment: we do not reassemble, and the kernel would answer
 * for our port with a RST. Later fragments carry no ports and go to the
 * kernel, which cannot complete a datagram without its first fragment and
 * discards them silently. An IPv6 packet whose fixed header is followed by
 * extension headers is walked (at most ZS_IPV6_EXT_MAX of them) to its
 * ports: if they are ours it is dropped and counted ipv6_ext (the datapath
 * takes only TCP or UDP right after the fixed header, and the kernel would
 * answer for our port with a RST); a non-first fragment, ESP, or a chain
 * longer than that is the kernel's. Everything else - ARP, ICMP, ICMPv6
 * and neighbour discovery, fragments of other traffic, other ports,
 * malformed headers - is XDP_PASS.
 *
 * Section "xdp.frags": the program only reads the linear part of a
 * multi-buffer frame, which always holds the headers it parses.
 * See steer.h for map layouts and the slot numbering.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "steer.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZS_FLOWS_MAX);
	__type(key, struct zs_flow_key);
	__type(value, struct zs_flow_val);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZS_LISTEN_MAX);
	__type(key, struct zs_listen_key);
	__type(value, __u32);
} listen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZS_FLOWS_MAX);
	__type(key, struct zs_flow6_key);
	__type(value, struct zs_flow_val);
} flows6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZS_LISTEN_MAX);
	__type(key, struct zs_listen6_key);
	__type(value, __u32);
} listen6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, ZS_XSKS_MAX);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ZS_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 which, int action)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &which);

	if (value)
		*value += 1; /* per-CPU slot: no atomic needed */
	return action;
}

/* Redirect into `slot`, counted as `which`; an empty slot drops the packet
 * (lower bits of the flags are the action bpf_redirect_map returns when
 * the lookup fails). */
static __always_inline int steer(__u32 slot, __u32 which)
{
	if (bpf_redirect_map(&xsks, slot, XDP_DROP) == XDP_REDIRECT)
		return count(which, XDP_REDIRECT);
	return count(ZS_CNT_NO_SOCKET, XDP_DROP);
}

/* The catch-all socket of rx queue `queue` lives in slot `queue`. A queue
 * beyond ZS_MAX_QUEUES has no catch-all slot (those numbers belong to
 * per-flow sockets): the packet is ours but has nowhere to go. */
static __always_inline int steer_catch_all(__u32 queue, __u32 which)
{
	if (queue >= ZS_MAX_QUEUES)
		return count(ZS_CNT_NO_SOCKET, XDP_DROP);
	return steer(queue, which);
}

/* Whether `fk` names a flow or a listening (address, port) of ours. */
static __always_inline int ours(struct zs_flow_key *fk)
{
	struct zs_listen_key lk = {};

	if (bpf_map_lookup_elem(&flows, fk))
		return 1;
	lk.daddr = fk->daddr;
	lk.dport = fk->dport;
	lk.proto = fk->proto;
	if (bpf_map_lookup_elem(&listen, &lk))
		return 1;
	lk.daddr = 0;
	return bpf_map_lookup_elem(&listen, &lk) != 0;
}

/* An IPv4 fragment: only the first (offset 0) carries the ports, in the
 * first four bytes of either L4 header. */
static __always_inline int fragment(struct iphdr *ip, void *l4, void *data_end)
{
	struct zs_flow_key fk = {};
	__be16 *ports = l4;

	if (ip->frag_off & bpf_htons(0x1fff))
		return count(ZS_CNT_PASSED, XDP_PASS);
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return count(ZS_CNT_PASSED, XDP_PASS);
	if ((void *)(ports + 2) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	fk.saddr = ip->saddr;
	fk.daddr = ip->daddr;
	fk.sport = ports[0];
	fk.dport = ports[1];
	fk.proto = ip->protocol;
	if (ours(&fk))
		return count(ZS_CNT_IP_FRAGMENT, XDP_DROP);
	return count(ZS_CNT_PASSED, XDP_PASS);
}

/* The 5-tuple of a flow's packet, in either family's maps: its flow
 * entry's slot on its own queue (else the arrival queue's catch-all), or a
 * listen entry for the destination or any address. */
static __always_inline int steer6(struct xdp_md *ctx, struct zs_flow6_key *fk)
{
	struct zs_listen6_key lk = {};
	struct zs_flow_val *flow;

	flow = bpf_map_lookup_elem(&flows6, fk);
	if (flow) {
		if (flow->queue == ctx->rx_queue_index)
			return steer(flow->slot, ZS_CNT_STEERED);
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_OTHER_QUEUE);
	}
	__builtin_memcpy(lk.daddr, fk->daddr, sizeof(lk.daddr));
	lk.dport = fk->dport;
	lk.proto = fk->proto;
	if (bpf_map_lookup_elem(&listen6, &lk))
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_STEERED);
	__builtin_memset(lk.daddr, 0, sizeof(lk.daddr));
	if (bpf_map_lookup_elem(&listen6, &lk))
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_STEERED);
	return count(ZS_CNT_PASSED, XDP_PASS);
}

/* Whether `fk` names an IPv6 flow or listening (address, port) of ours. */
static __always_inline int ours6(struct zs_flow6_key *fk)
{
	struct zs_listen6_key lk = {};

	if (bpf_map_lookup_elem(&flows6, fk))
		return 1;
	__builtin_memcpy(lk.daddr, fk->daddr, sizeof(lk.daddr));
	lk.dport = fk->dport;
	lk.proto = fk->proto;
	if (bpf_map_lookup_elem(&listen6, &lk))
		return 1;
	__builtin_memset(lk.daddr, 0, sizeof(lk.daddr));
	return bpf_map_lookup_elem(&listen6, &lk) != 0;
}

/* An IPv6 packet with extension headers after the fixed header: walks
 * them to the TCP or UDP ports and drops the packet if they are ours. */
static __always_inline int extensions6(struct ipv6hdr *ip6, void *data_end,
				       struct zs_flow6_key *fk)
{
	__u8 next = ip6->nexthdr;
	void *at = ip6 + 1;
	__be16 *ports;
	int i;

#pragma unroll
	for (i = 0; i < ZS_IPV6_EXT_MAX; i++) {
		__u8 *h = at;

		if (next == IPPROTO_TCP || next == IPPROTO_UDP)
			break;
		if ((void *)(h + 8) > data_end)
			return count(ZS_CNT_MALFORMED, XDP_PASS);
		switch (next) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
		case 135: /* mobility */
		case 139: /* HIP */
		case 140: /* shim6 */
			at += ((__u32)h[1] + 1) * 8;
			break;
		case IPPROTO_AH:
			at += ((__u32)h[1] + 2) * 4;
			break;
		case IPPROTO_FRAGMENT:
			/* Only the first fragment (offset 0) has the ports. */
			if ((h[2] << 8 | h[3]) & 0xfff8)
				return count(ZS_CNT_PASSED, XDP_PASS);
			at += 8;
			break;
		default: /* ESP, ICMPv6, no next header, ...: not ours */
			return count(ZS_CNT_PASSED, XDP_PASS);
		}
		next = h[0];
	}
	if (next != IPPROTO_TCP && next != IPPROTO_UDP)
		return count(ZS_CNT_PASSED, XDP_PASS);
	ports = at;
	if ((void *)(ports + 2) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	fk->sport = ports[0];
	fk->dport = ports[1];
	fk->proto = next;
	if (ours6(fk))
		return count(ZS_CNT_IPV6_EXT, XDP_DROP);
	return count(ZS_CNT_PASSED, XDP_PASS);
}

/* An IPv6 packet: its fixed header, then TCP or UDP (steered like IPv4)
 * or extension headers (see extensions6). */
static __always_inline int ipv6(struct xdp_md *ctx, void *l3, void *data_end)
{
	struct ipv6hdr *ip6 = l3;
	struct zs_flow6_key fk = {};
	__be16 *ports;

	if ((void *)(ip6 + 1) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	if (ip6->version != 6)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	__builtin_memcpy(fk.saddr, &ip6->saddr, sizeof(fk.saddr));
	__builtin_memcpy(fk.daddr, &ip6->daddr, sizeof(fk.daddr));
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return extensions6(ip6, data_end, &fk);
	ports = (void *)(ip6 + 1);
	if ((void *)(ports + 2) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	fk.sport = ports[0];
	fk.dport = ports[1];
	fk.proto = ip6->nexthdr;
	return steer6(ctx, &fk);
}

SEC("xdp.frags")
int zs_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct zs_flow_key fk = {};
	struct zs_listen_key lk = {};
	struct zs_flow_val *flow;
	__u32 ihl_bytes;
	void *l4;

	if ((void *)(eth + 1) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return ipv6(ctx, eth + 1, data_end);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(ZS_CNT_PASSED, XDP_PASS); /* ARP, VLAN, ... */

	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	ihl_bytes = (__u32)ip->ihl * 4;
	if (ip->version != 4 || ihl_bytes < sizeof(*ip))
		return count(ZS_CNT_MALFORMED, XDP_PASS);
	l4 = (void *)ip + ihl_bytes;
	/* More fragments, or an offset: see fragment(). */
	if (ip->frag_off & bpf_htons(0x3fff))
		return fragment(ip, l4, data_end);
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return count(ZS_CNT_PASSED, XDP_PASS);

	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return count(ZS_CNT_MALFORMED, XDP_PASS);
		fk.sport = th->source;
		fk.dport = th->dest;
	} else {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return count(ZS_CNT_MALFORMED, XDP_PASS);
		fk.sport = uh->source;
		fk.dport = uh->dest;
	}
	fk.saddr = ip->saddr;
	fk.daddr = ip->daddr;
	fk.proto = ip->protocol;

	flow = bpf_map_lookup_elem(&flows, &fk);
	if (flow) {
		if (flow->queue == ctx->rx_queue_index)
			return steer(flow->slot, ZS_CNT_STEERED);
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_OTHER_QUEUE);
	}

	lk.daddr = fk.daddr;
	lk.dport = fk.dport;
	lk.proto = fk.proto;
	if (bpf_map_lookup_elem(&listen, &lk))
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_STEERED);
	lk.daddr = 0;
	if (bpf_map_lookup_elem(&listen, &lk))
		return steer_catch_all(ctx->rx_queue_index, ZS_CNT_STEERED);

	return count(ZS_CNT_PASSED, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
