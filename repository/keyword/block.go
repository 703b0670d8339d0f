package keyword

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// BlockSize is the number of postings in a full keyword block: Lucene's
// choice, small enough that one block's bound is tight and one fetch cheap,
// large enough that headers are a small fraction of the index.
const BlockSize = 128

// Posting is one (chunk, term) pair of the keyword index.
type Posting struct {
	ID     int64
	TF, DL int32
}

// Impact is a (tf, dl) pair that bounds a block's postings: every Posting in
// the block has tf ≤ Impact.TF and dl ≥ Impact.DL for some Impact of it.
type Impact struct{ TF, DL int32 }

// Head is a block's header: its chunk-id range, size and frontier.
type Head struct {
	Last, First int64
	N           int
	Impacts     []Impact
}

// PostingBytes is the size of one posting in a block payload: int8 id,
// int4 tf, int4 dl, big-endian.
const PostingBytes = 16

// Frontier returns the Pareto frontier of postings by (high tf, low dl),
// in decreasing tf: the BM25 term score grows with tf and falls with dl,
// so the frontier's best score bounds every Posting's for any statistics.
// migrations/0007 computes the same set in SQL.
func Frontier(ps []Posting) []Impact {
	sorted := make([]Impact, len(ps))
	for i, p := range ps {
		sorted[i] = Impact{p.TF, p.DL}
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].TF != sorted[j].TF {
			return sorted[i].TF > sorted[j].TF
		}
		return sorted[i].DL < sorted[j].DL
	})
	var out []Impact
	minDL := int32(math.MaxInt32)
	for _, im := range sorted {
		if im.DL < minDL {
			out = append(out, im)
			minDL = im.DL
		}
	}
	return out
}

// EncodeBlock returns the head and payload of postings sorted by id.
func EncodeBlock(ps []Posting) (head, payload []byte) {
	imps := Frontier(ps)
	head = make([]byte, 0, 24+8*len(imps))
	head = binary.BigEndian.AppendUint64(head, uint64(ps[len(ps)-1].ID))
	head = binary.BigEndian.AppendUint64(head, uint64(ps[0].ID))
	head = binary.BigEndian.AppendUint32(head, uint32(len(ps)))
	head = binary.BigEndian.AppendUint32(head, uint32(len(imps)))
	for _, im := range imps {
		head = binary.BigEndian.AppendUint32(head, uint32(im.TF))
		head = binary.BigEndian.AppendUint32(head, uint32(im.DL))
	}
	payload = make([]byte, 0, PostingBytes*len(ps))
	for _, p := range ps {
		payload = binary.BigEndian.AppendUint64(payload, uint64(p.ID))
		payload = binary.BigEndian.AppendUint32(payload, uint32(p.TF))
		payload = binary.BigEndian.AppendUint32(payload, uint32(p.DL))
	}
	return head, payload
}

// DecodeHeads parses concatenated block heads. A common term has thousands
// of blocks at a million chunks, so it checks the lengths in a first pass
// and then fills two arrays: the heads, and every head's impacts end to end.
func DecodeHeads(b []byte) ([]Head, error) {
	heads, imps := 0, 0
	for rest := b; len(rest) > 0; heads++ {
		if len(rest) < 24 {
			return nil, fmt.Errorf("keyword block head: %d trailing bytes", len(rest))
		}
		m := int(binary.BigEndian.Uint32(rest[20:]))
		if rest = rest[24:]; len(rest) < 8*m {
			return nil, fmt.Errorf("keyword block head: %d impacts in %d bytes", m, len(rest))
		}
		rest, imps = rest[8*m:], imps+m
	}
	out, backing := make([]Head, heads), make([]Impact, imps)
	for i := range out {
		m := int(binary.BigEndian.Uint32(b[20:]))
		out[i] = Head{
			Last:    int64(binary.BigEndian.Uint64(b)),
			First:   int64(binary.BigEndian.Uint64(b[8:])),
			N:       int(binary.BigEndian.Uint32(b[16:])),
			Impacts: backing[:m:m],
		}
		backing, b = backing[m:], b[24:]
		for j := range out[i].Impacts {
			out[i].Impacts[j] = Impact{int32(binary.BigEndian.Uint32(b)), int32(binary.BigEndian.Uint32(b[4:]))}
			b = b[8:]
		}
	}
	return out, nil
}

// DecodePostings parses a block payload.
func DecodePostings(b []byte) ([]Posting, error) {
	if len(b)%PostingBytes != 0 {
		return nil, fmt.Errorf("keyword block payload: %d bytes", len(b))
	}
	out := make([]Posting, len(b)/PostingBytes)
	for i := range out {
		out[i] = Posting{
			ID: int64(binary.BigEndian.Uint64(b)),
			TF: int32(binary.BigEndian.Uint32(b[8:])),
			DL: int32(binary.BigEndian.Uint32(b[12:])),
		}
		b = b[PostingBytes:]
	}
	return out, nil
}

// bm25 holds a query's statistics; termScore is Okapi BM25 with Lucene's
// idf, computed in the order the reference SQL used so scores agree to the
// last bits.
type bm25 struct {
	k1, b, avgdl float64
}

func (m bm25) idf(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }

func (m bm25) termScore(weight float64, tf, dl int32) float64 {
	return weight * float64(tf) * (m.k1 + 1) / (float64(tf) + m.k1*(1-m.b+m.b*float64(dl)/m.avgdl))
}

// bound is the highest term score any Posting under these impacts can have.
func (m bm25) bound(weight float64, imps []Impact) float64 {
	best := 0.0
	for _, im := range imps {
		best = max(best, m.termScore(weight, im.TF, im.DL))
	}
	return best
}
