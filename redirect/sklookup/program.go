package sklookup

import (
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Offsets into struct bpf_sk_lookup (include/uapi/linux/bpf.h); stable since
// the program type appeared in Linux 5.9.
const (
	ctxFamily    = 8
	ctxProtocol  = 12
	ctxLocalIP4  = 40 // network byte order
	ctxLocalIP6  = 44 // four 32-bit words, network byte order
	ctxLocalPort = 60 // host byte order
)

// Return codes of an sk_lookup program.
const (
	skDrop = 0
	skPass = 1
)

// The program builds one mapKey on its stack at keyOff and uses it for both
// maps: whole for targets, with Port and Proto zeroed for guarded. slotOff
// holds the sockets map's key.
const (
	keyOff  = -24 // mapKey: Addr 16, Port 2, Proto 1, Family 1 = 20 bytes
	slotOff = -28
)

// program assembles the sk_lookup program over the three maps' descriptors.
//
// For a packet of protocol P to local address A, port N:
//
//	targets[{A, N, P, family}] == Steer: assign the socket in slot (P, family);
//	                                     drop when the slot is empty or the
//	                                     kernel refuses the socket
//	                           == Discard: the same with the discarding slot
//	                           == ServeNode: the same with the node-only slot
//	                           == Drop:  drop
//	not a target, guarded[{A, family}]:  drop
//	otherwise:                           pass (the kernel's own lookup)
//
// Registers: R6 context, R7 family's slot offset (0 IPv4, 1 IPv6), R8 protocol,
// R9 the socket taken from the sockets map (a reference to release).
func program(targetsFD, guardedFD, socketsFD int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, ctxFamily, asm.Word),
		asm.JEq.Imm(asm.R2, unix.AF_INET, "ipv4"),
		asm.JEq.Imm(asm.R2, unix.AF_INET6, "ipv6"),
		asm.Ja.Label("pass"),

		// IPv4: the address as ::ffff:a.b.c.d, byte for byte.
		asm.StoreImm(asm.RFP, keyOff, 0, asm.Word).WithSymbol("ipv4"),
		asm.StoreImm(asm.RFP, keyOff+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, keyOff+8, 0, asm.Half),
		asm.StoreImm(asm.RFP, keyOff+10, 0xffff, asm.Half),
		asm.LoadMem(asm.R3, asm.R6, ctxLocalIP4, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+12, asm.R3, asm.Word),
		asm.Mov.Imm(asm.R7, 0),
		asm.Ja.Label("key"),

		asm.LoadMem(asm.R3, asm.R6, ctxLocalIP6, asm.Word).WithSymbol("ipv6"),
		asm.StoreMem(asm.RFP, keyOff, asm.R3, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, ctxLocalIP6+4, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+4, asm.R3, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, ctxLocalIP6+8, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+8, asm.R3, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, ctxLocalIP6+12, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+12, asm.R3, asm.Word),
		asm.Mov.Imm(asm.R7, 1),

		// Port, protocol and family complete the key.
		asm.LoadMem(asm.R3, asm.R6, ctxLocalPort, asm.Word).WithSymbol("key"),
		asm.StoreMem(asm.RFP, keyOff+16, asm.R3, asm.Half),
		asm.LoadMem(asm.R8, asm.R6, ctxProtocol, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+18, asm.R8, asm.Byte),
		asm.StoreMem(asm.RFP, keyOff+19, asm.R2, asm.Byte),

		asm.LoadMapPtr(asm.R1, targetsFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "not_target"),
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R2, int32(Steer), "steer"),
		asm.JEq.Imm(asm.R2, int32(ServeNode), "serve_node"),
		asm.JNE.Imm(asm.R2, int32(Discard), "drop"),
		asm.Add.Imm(asm.R7, int32(discardingOffset)),
		asm.Ja.Label("steer"),
		asm.Add.Imm(asm.R7, int32(2*discardingOffset)).WithSymbol("serve_node"),

		// Steer: slot = family offset, +2 for UDP (TCP4, TCP6, UDP4, UDP6),
		// +4 to discard, +8 to serve the node only.
		asm.JEq.Imm(asm.R8, unix.IPPROTO_TCP, "slot").WithSymbol("steer"),
		asm.JNE.Imm(asm.R8, unix.IPPROTO_UDP, "drop"),
		asm.Add.Imm(asm.R7, 2),
		asm.StoreMem(asm.RFP, slotOff, asm.R7, asm.Word).WithSymbol("slot"),
		asm.LoadMapPtr(asm.R1, socketsFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, slotOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"), // an empty slot never falls through to a squatter
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnSkAssign.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.FnSkRelease.Call(),
		asm.JNE.Imm(asm.R7, 0, "drop"), // wrong protocol or family for the packet
		asm.Ja.Label("pass"),

		// Not a target: a guarded address answers on no other port.
		asm.StoreImm(asm.RFP, keyOff+16, 0, asm.Half).WithSymbol("not_target"),
		asm.StoreImm(asm.RFP, keyOff+18, 0, asm.Byte),
		asm.LoadMapPtr(asm.R1, guardedFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),

		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, skDrop).WithSymbol("drop"),
		asm.Return(),
	}
}
