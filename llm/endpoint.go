package llm

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// Endpoint is one model server that can answer a chat: the primary (from
// the RAGENT_LLM_* settings) or a fallback (from RAGENT_LLM_FALLBACKS_FILE).
type Endpoint struct {
	// Name identifies the endpoint in metrics, logs and its Redis cooldown
	// key; default "provider/chatModel".
	Name       string `json:"name"`
	Provider   string `json:"provider"`
	BaseURL    string `json:"baseURL"`
	APIKey     string `json:"apiKey"`
	APIKeyEnv  string `json:"apiKeyEnv"` // read the key from this environment variable instead
	APIVersion string `json:"apiVersion"`
	Region     string `json:"region"`
	ChatModel  string `json:"chatModel"`
	FastModel  string `json:"fastModel"`

	ThinkingModel  string `json:"thinkingModel"`
	Thinking       string `json:"thinking"`
	ThinkingBudget int    `json:"thinkingBudget"`

	// RequestsPerMinute and TokensPerMinute are the endpoint's budget,
	// shared by every instance (0 = unlimited; the primary's come from
	// RAGENT_LLM_REQUESTS_PER_MINUTE and RAGENT_LLM_TOKENS_PER_MINUTE).
	RequestsPerMinute int `json:"requestsPerMinute"`
	TokensPerMinute   int `json:"tokensPerMinute"`
}

// primary is the endpoint the flat Config fields describe.
func (c Config) primary() Endpoint {
	return Endpoint{
		Provider: c.Provider, BaseURL: c.BaseURL, APIKey: c.APIKey, APIVersion: c.APIVersion, Region: c.Region,
		ChatModel: c.ChatModel, FastModel: c.FastModel,
		ThinkingModel: c.ThinkingModel, Thinking: c.Thinking, ThinkingBudget: c.ThinkingBudget,
	}.withDefaults()
}

func (e Endpoint) withDefaults() Endpoint {
	if e.BaseURL == "" {
		e.BaseURL = defaultBaseURL(e.Provider)
	}
	if e.FastModel == "" {
		e.FastModel = e.ChatModel
	}
	if e.Name == "" {
		e.Name = e.Provider + "/" + e.ChatModel
	}
	if e.Thinking == "" {
		e.Thinking = ThinkingAuto
	}
	if e.ThinkingBudget <= 0 {
		e.ThinkingBudget = DefaultThinkingBudget
	}
	if e.Provider == ProviderAzure && e.APIVersion == "" {
		e.APIVersion = DefaultAzureAPIVersion
	}
	return e
}

func (e Endpoint) validate() error {
	switch e.Provider {
	case ProviderOpenAI, ProviderAzure, ProviderMistral, ProviderOllama, ProviderAnthropic, ProviderGoogleAI, ProviderBedrock:
	default:
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: unknown provider %q", e.Name, e.Provider)
	}
	if e.ChatModel == "" {
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: a chatModel is required", e.Name)
	}
	if e.RequestsPerMinute < 0 || e.TokensPerMinute < 0 {
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: requestsPerMinute and tokensPerMinute must be 0 (unlimited) or more", e.Name)
	}
	switch e.Thinking {
	case ThinkingAuto, ThinkingEnable, ThinkingOff:
	default:
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: thinking %q is not auto, enable_thinking or off", e.Name, e.Thinking)
	}
	if e.Provider == ProviderAzure && e.BaseURL == "" {
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: azure needs the resource URL (https://NAME.openai.azure.com)", e.Name)
	}
	if e.Provider == ProviderBedrock && e.Region == "" {
		return service.Errorf(service.ErrInvalid, "llm: endpoint %s: bedrock needs a region", e.Name)
	}
	return nil
}

// LoadFallbacks reads the fallback endpoints from a JSON file holding an
// array of Endpoint objects, in the order they are tried. A key may be
// given as apiKeyEnv, the name of an environment variable read by getenv,
// so the file itself holds no secret.
func LoadFallbacks(path string, getenv func(string) string) ([]Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llm fallbacks: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var eps []Endpoint
	if err := dec.Decode(&eps); err != nil {
		return nil, service.Errorf(service.ErrInvalid, "llm fallbacks %s: %v", path, err)
	}
	seen := map[string]bool{}
	for i := range eps {
		if eps[i].APIKeyEnv != "" && eps[i].APIKey == "" {
			eps[i].APIKey = getenv(eps[i].APIKeyEnv)
		}
		eps[i] = eps[i].withDefaults()
		if err := eps[i].validate(); err != nil {
			return nil, err
		}
		if seen[eps[i].Name] {
			return nil, service.Errorf(service.ErrInvalid, "llm fallbacks %s: endpoint name %q appears twice", path, eps[i].Name)
		}
		seen[eps[i].Name] = true
	}
	return eps, nil
}

// modelFor is the model a request answered by model goes to: the thinking
// model when the request asks for deep thinking and e has one.
func (e Endpoint) modelFor(model string, thinking bool) string {
	if thinking && e.ThinkingModel != "" {
		return e.ThinkingModel
	}
	return model
}

// Endpoints lists the chat endpoints of c, the primary first, as
// NewChatModels uses them (defaults applied); none offline.
func (c Config) Endpoints() []Endpoint {
	c = c.withDefaults()
	if c.Provider == ProviderOffline {
		return nil
	}
	return append([]Endpoint{c.primary()}, c.Fallbacks...)
}
