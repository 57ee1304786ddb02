package gpuworker

import "encoding/binary"

// TextBlockBytes is the number of prompt bytes one KV-cache block covers for
// text prompts: BlockSize tokens of four bytes each, the rule CountTokens
// uses.
const TextBlockBytes = 4 * BlockSize

// domainText keeps text-derived hashes apart from token and trace hashes.
const domainText uint64 = 0x74657874 // "text"

// HashTextBlocks returns one chained hash per full TextBlockBytes chunk of
// text, chained like HashTokenBlocks: hash i covers text[:(i+1)*64], so two
// prompts share leading hashes exactly as far as they share whole 64-byte
// chunks. It is consistent with CountTokens (16 simulated tokens per chunk),
// so a router can compute the block hashes a worker's prefix cache will see.
// A trailing partial chunk gets no hash.
func HashTextBlocks(text string) []uint64 {
	n := len(text) / TextBlockBytes
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	prev := domainText
	var word [8]byte
	for i := range n {
		h := mix64(fnvOffset, prev)
		chunk := text[i*TextBlockBytes : (i+1)*TextBlockBytes]
		for k := 0; k < TextBlockBytes; k += 8 {
			copy(word[:], chunk[k:k+8])
			h = mix64(h, binary.LittleEndian.Uint64(word[:]))
		}
		prev = finish(h)
		out[i] = prev
	}
	return out
}

// chatBlockText lays out a chat prompt as the byte stream whose blocks are
// hashed: for each message, its role padded or cut to the
// 4*ChatTokensPerMessage framing bytes, then its content padded with zero
// bytes to 4*CountTokens(content). The stream is exactly 4 bytes per token
// of CountChatTokens (for a non-empty list), so its blocks line up with the
// engine's.
func chatBlockText(roles, contents []string) string {
	size := 0
	for _, c := range contents {
		size += 4 * (CountTokens(c) + ChatTokensPerMessage)
	}
	buf := make([]byte, 0, size)
	const frame = 4 * ChatTokensPerMessage
	for i, c := range contents {
		start := len(buf)
		buf = append(buf, roles[i]...)
		buf = buf[:min(len(buf), start+frame)]
		for len(buf) < start+frame {
			buf = append(buf, 0)
		}
		start = len(buf)
		buf = append(buf, c...)
		for len(buf) < start+4*CountTokens(c) {
			buf = append(buf, 0)
		}
	}
	return string(buf)
}
