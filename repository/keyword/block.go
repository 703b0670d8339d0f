package repository

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// blockSize is the number of postings in a full keyword block: Lucene's
// choice, small enough that one block's bound is tight and one fetch cheap,
// large enough that headers are a small fraction of the index.
const blockSize = 128

// posting is one (chunk, term) pair of the keyword index.
type posting struct {
	id     int64
	tf, dl int32
}

// impact is a (tf, dl) pair that bounds a block's postings: every posting in
// the block has tf ≤ impact.tf and dl ≥ impact.dl for some impact of it.
type impact struct{ tf, dl int32 }

// blockHead is a block's header: its chunk-id range, size and frontier.
type blockHead struct {
	last, first int64
	n           int
	impacts     []impact
}

const postingBytes = 16 // int8 id, int4 tf, int4 dl

// frontier returns the Pareto frontier of postings by (high tf, low dl),
// in decreasing tf: the BM25 term score grows with tf and falls with dl,
// so the frontier's best score bounds every posting's for any statistics.
// migrations/0007 computes the same set in SQL.
func frontier(ps []posting) []impact {
	sorted := make([]impact, len(ps))
	for i, p := range ps {
		sorted[i] = impact{p.tf, p.dl}
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].tf != sorted[j].tf {
			return sorted[i].tf > sorted[j].tf
		}
		return sorted[i].dl < sorted[j].dl
	})
	var out []impact
	minDL := int32(math.MaxInt32)
	for _, im := range sorted {
		if im.dl < minDL {
			out = append(out, im)
			minDL = im.dl
		}
	}
	return out
}

// encodeBlock returns the head and payload of postings sorted by id.
func encodeBlock(ps []posting) (head, payload []byte) {
	imps := frontier(ps)
	head = make([]byte, 0, 24+8*len(imps))
	head = binary.BigEndian.AppendUint64(head, uint64(ps[len(ps)-1].id))
	head = binary.BigEndian.AppendUint64(head, uint64(ps[0].id))
	head = binary.BigEndian.AppendUint32(head, uint32(len(ps)))
	head = binary.BigEndian.AppendUint32(head, uint32(len(imps)))
	for _, im := range imps {
		head = binary.BigEndian.AppendUint32(head, uint32(im.tf))
		head = binary.BigEndian.AppendUint32(head, uint32(im.dl))
	}
	payload = make([]byte, 0, postingBytes*len(ps))
	for _, p := range ps {
		payload = binary.BigEndian.AppendUint64(payload, uint64(p.id))
		payload = binary.BigEndian.AppendUint32(payload, uint32(p.tf))
		payload = binary.BigEndian.AppendUint32(payload, uint32(p.dl))
	}
	return head, payload
}

// decodeHeads parses concatenated block heads. A common term has thousands
// of blocks at a million chunks, so it checks the lengths in a first pass
// and then fills two arrays: the heads, and every head's impacts end to end.
func decodeHeads(b []byte) ([]blockHead, error) {
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
	out, backing := make([]blockHead, heads), make([]impact, imps)
	for i := range out {
		m := int(binary.BigEndian.Uint32(b[20:]))
		out[i] = blockHead{
			last:    int64(binary.BigEndian.Uint64(b)),
			first:   int64(binary.BigEndian.Uint64(b[8:])),
			n:       int(binary.BigEndian.Uint32(b[16:])),
			impacts: backing[:m:m],
		}
		backing, b = backing[m:], b[24:]
		for j := range out[i].impacts {
			out[i].impacts[j] = impact{int32(binary.BigEndian.Uint32(b)), int32(binary.BigEndian.Uint32(b[4:]))}
			b = b[8:]
		}
	}
	return out, nil
}

// decodePostings parses a block payload.
func decodePostings(b []byte) ([]posting, error) {
	if len(b)%postingBytes != 0 {
		return nil, fmt.Errorf("keyword block payload: %d bytes", len(b))
	}
	out := make([]posting, len(b)/postingBytes)
	for i := range out {
		out[i] = posting{
			id: int64(binary.BigEndian.Uint64(b)),
			tf: int32(binary.BigEndian.Uint32(b[8:])),
			dl: int32(binary.BigEndian.Uint32(b[12:])),
		}
		b = b[postingBytes:]
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

// bound is the highest term score any posting under these impacts can have.
func (m bm25) bound(weight float64, imps []impact) float64 {
	best := 0.0
	for _, im := range imps {
		best = max(best, m.termScore(weight, im.tf, im.dl))
	}
	return best
}
