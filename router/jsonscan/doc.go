// Package jsonscan walks raw JSON bytes without decoding them: the index
// after a string, after a whole value, after blanks; and Valid and Object,
// which validate a text exactly as json.Valid does, several times faster,
// Object handing over the top-level members in the same pass. The router
// uses it to validate a request body once and find the few fields it reads
// or edits in a body it forwards untouched.
//
// Contracts: the Skip functions do not validate their input (callers
// validate it first); every function returns -1 rather than read past the
// end; nothing allocates.
//
// This package imports nothing of ours.
package jsonscan
