// Package jsonscan walks raw JSON bytes without decoding them: the index
// after a string, after a whole value, after blanks. The router uses it to
// find the few fields it reads or edits in a body it forwards untouched.
//
// Contracts: the input is not validated (callers parse or decode it
// first); every function returns -1 rather than read past the end.
//
// This package imports nothing of ours.
package jsonscan
