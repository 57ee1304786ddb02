// Package policies holds the routing contract and the registry of named
// policies. A Picker chooses one endpoint for a request from endpoints the
// router has already filtered (available, not tripped, not full), so a policy
// only chooses.
//
// Contracts: Pick reads only atomics and immutable snapshots (and writes
// only atomics of its own, such as a PrefixTable) and allocates nothing; a
// Factory decodes its parameters strictly and names a bad one.
// Implementations live in subpackages (policies/roundrobin, ...);
// policies/all is the one list of built-ins, registered explicitly from main.
// This package also holds what several policies share: seeded lock-free
// randomness (Rand, Stream, Sample), the load estimates (QueueDepth,
// TwoChoices, PrefillAhead, PrefillBacklog), the record of where prefixes
// were sent (PrefixTable), and caches of per-pool structures (Memo, Ring,
// Affinity).
//
// The other stages of the request pipeline that decide things live beside
// the policies: policies/quota (tenant limits and their stores) and
// policies/admission (service classes and the late-binding queue).
//
// This package may import backends for the read-only endpoint view; it must
// never import the router.
package policies
