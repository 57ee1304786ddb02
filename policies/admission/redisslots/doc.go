// Package redisslots is the Redis implementation of admission.Slots: each
// backend's leases are a sorted set scored by expiry, each class's waiting
// requests a sorted set scored by when they began to wait, each backend's
// pending prompts a hash by lease (tokens and until when), all under one
// hash tag per pool so a Cluster keeps a pool on one slot. Acquire is one
// Lua script.
//
// This package must not import the router.
package redisslots
