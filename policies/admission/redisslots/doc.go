// Package redisslots is the Redis implementation of admission.Slots: each
// backend's leases are a sorted set scored by expiry, each class's waiting
// requests (and each class and tenant's) a sorted set scored by when they
// arrived, each backend's pending prompts a hash by lease (tokens and until
// when), all under one hash tag per pool so a Cluster keeps a pool on one
// slot. Acquire is one Lua script. Release and Prefilled publish the
// backend on one channel, which Watch hands to every replica's gates.
//
// This package must not import the router.
package redisslots
