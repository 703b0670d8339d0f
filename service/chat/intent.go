package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Intent matching thresholds: a leaf matches when its score reaches
// minLexicalScore (lexical matching) or minLLMScore (the fast model's score)
// and at least relIntentScore of the best score; at most maxIntents leaves
// route one question.
const (
	minLexicalScore = 0.34
	minLLMScore     = 0.5
	relIntentScore  = 0.8
	maxIntents      = 3
)

// enabledLeaves returns the enabled leaves of the tree; a disabled node
// disables its whole subtree.
func enabledLeaves(roots []*service.IntentNode) []*service.IntentNode {
	var out []*service.IntentNode
	var walk func(n *service.IntentNode)
	walk = func(n *service.IntentNode) {
		if !n.Enabled {
			return
		}
		if len(n.Children) == 0 {
			out = append(out, n)
			return
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

type scored struct {
	node  *service.IntentNode
	score float64
}

// classify returns the intents the question belongs to, best first: scored
// by the fast model when there is one (falling back to lexical matching on
// any failure or invalid answer), else lexically. Branches that route only
// to knowledge bases the user cannot read (absent from readable) are
// skipped, so they neither answer nor crowd out a readable branch.
func (t *turn) classify(ctx context.Context, question string, readable map[service.ID]service.KBRole) []*service.IntentNode {
	tree, err := t.s.d.Intents.IntentTree(ctx)
	if err != nil {
		t.log.WarnContext(ctx, "intent tree unavailable; searching every knowledge base", "err", err)
		return nil
	}
	leaves := usableLeaves(enabledLeaves(tree), readable)
	if len(leaves) == 0 {
		return nil
	}
	if t.s.d.FastModel != nil {
		matched, err := t.classifyLLM(ctx, question, leaves)
		if err == nil {
			return matched
		}
		if ctx.Err() == nil {
			t.log.WarnContext(ctx, "intent scoring by the model failed; using lexical matching", "err", err)
		}
	}
	return pick(lexicalScores(question, leaves), minLexicalScore)
}

// lexicalScores scores each leaf by the share of the question's terms found
// in its name, path, description or best example.
func lexicalScores(question string, leaves []*service.IntentNode) []scored {
	q := termSet(question)
	if len(q) == 0 {
		return nil
	}
	out := make([]scored, 0, len(leaves))
	for _, n := range leaves {
		best := overlap(q, termSet(n.Name+" "+n.Path+" "+n.Description))
		for _, ex := range n.Examples {
			best = max(best, overlap(q, termSet(ex)))
		}
		out = append(out, scored{n, best})
	}
	return out
}

func termSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, t := range text.Tokenize(s) {
		set[t] = true
	}
	return set
}

// overlap is the share of q's terms that d has.
func overlap(q, d map[string]bool) float64 {
	if len(q) == 0 {
		return 0
	}
	n := 0
	for t := range q {
		if d[t] {
			n++
		}
	}
	return float64(n) / float64(len(q))
}

// pick keeps the leaves above the threshold and close to the best, best first.
func pick(all []scored, threshold float64) []*service.IntentNode {
	sort.SliceStable(all, func(i, j int) bool { return all[i].score > all[j].score })
	var out []*service.IntentNode
	for _, s := range all {
		if s.score < threshold || (len(out) > 0 && s.score < all[0].score*relIntentScore) || len(out) == maxIntents {
			break
		}
		out = append(out, s.node)
	}
	return out
}

const intentPrompt = `Classify the user's question against the intents below. Reply with a JSON object
{"scores":[{"code":"<intent code>","score":<0..1>}]} giving every intent a score of how well the question fits it.

Intents:
`

// classifyLLM asks the fast model for a JSON score per leaf. An answer that
// is not the expected JSON is an error, so the caller falls back.
func (t *turn) classifyLLM(ctx context.Context, question string, leaves []*service.IntentNode) ([]*service.IntentNode, error) {
	var b strings.Builder
	b.WriteString(intentPrompt)
	byCode := make(map[string]*service.IntentNode, len(leaves))
	for _, n := range leaves {
		byCode[n.Code] = n
		fmt.Fprintf(&b, "- code: %s\n  path: %s\n  description: %s\n", n.Code, n.Path, excerpt(n.Description, 300))
		if len(n.Examples) > 0 {
			fmt.Fprintf(&b, "  examples: %s\n", excerpt(strings.Join(n.Examples, " | "), 300))
		}
	}
	out, err := t.complete(ctx, service.UsageIntent, service.ChatRequest{
		Model: t.s.cfg.FastModel, JSON: true, MaxTokens: 400,
		Messages: []service.ChatMessage{{Role: service.ChatSystem, Content: b.String()}, {Role: service.ChatUser, Content: question}},
	})
	if err != nil {
		return nil, err
	}
	var answer struct {
		Scores []struct {
			Code  string  `json:"code"`
			Score float64 `json:"score"`
		} `json:"scores"`
	}
	if err := json.Unmarshal([]byte(jsonObject(out)), &answer); err != nil {
		return nil, fmt.Errorf("intent answer is not JSON: %w", err)
	}
	if answer.Scores == nil {
		return nil, fmt.Errorf("intent answer has no scores: %q", excerpt(out, 200))
	}
	var all []scored
	for _, sc := range answer.Scores {
		if n, ok := byCode[sc.Code]; ok && sc.Score >= 0 && sc.Score <= 1 {
			all = append(all, scored{n, sc.Score})
		}
	}
	return pick(all, minLLMScore), nil
}

// jsonObject trims prose or code fences a model may put around a JSON object.
func jsonObject(s string) string {
	start, end := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}')
	if start < 0 || end < start {
		return s
	}
	return s[start : end+1]
}

// usableLeaves drops kb leaves whose knowledge bases are all unreadable. A
// kb leaf with no knowledge base searches everything readable and stays.
func usableLeaves(leaves []*service.IntentNode, readable map[service.ID]service.KBRole) []*service.IntentNode {
	out := leaves[:0:0]
	for _, n := range leaves {
		usable := n.Kind != service.IntentKB || len(n.KnowledgeBaseIDs) == 0
		for _, id := range n.KnowledgeBaseIDs {
			if _, ok := readable[id]; ok {
				usable = true
				break
			}
		}
		if usable {
			out = append(out, n)
		}
	}
	return out
}

// routeKnowledgeBases is the union of the matched kb intents' readable
// knowledge bases; nil (search everything readable) when none matched.
func routeKnowledgeBases(matched []*service.IntentNode, readable map[service.ID]service.KBRole) []service.ID {
	seen := map[service.ID]bool{}
	var out []service.ID
	for _, n := range matched {
		if n.Kind != service.IntentKB {
			continue
		}
		for _, id := range n.KnowledgeBaseIDs {
			if _, ok := readable[id]; ok && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
