package llm

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/bedrock"
	"github.com/tmc/langchaingo/llms/googleai"
	"google.golang.org/api/option"

	"github.com/ragent-go/ragent/service"
)

// newLangchainModel builds the langchaingo model of a provider that speaks
// its own protocol, over client wrapped in callTransport.
func newLangchainModel(ep Endpoint, model string, client *http.Client, now func() time.Time) (llms.Model, error) {
	switch ep.Provider {
	case ProviderAnthropic:
		if ep.APIKey == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: endpoint %s: anthropic needs an API key", ep.Name)
		}
		opts := []anthropic.Option{
			anthropic.WithToken(ep.APIKey), anthropic.WithModel(model),
			anthropic.WithHTTPClient(newCallClient(client, nil, now)),
		}
		if ep.BaseURL != "" {
			opts = append(opts, anthropic.WithBaseURL(strings.TrimRight(ep.BaseURL, "/")))
		}
		return anthropic.New(opts...)
	case ProviderGoogleAI:
		return newGoogleAI(ep, googleai.WithDefaultModel(model), client, now)
	case ProviderBedrock:
		rc, err := newBedrockClient(ep, newCallClient(client, nil, now))
		if err != nil {
			return nil, err
		}
		return bedrock.New(bedrock.WithClient(rc), bedrock.WithModel(model))
	}
	return nil, service.Errorf(service.ErrInvalid, "llm: unknown provider %q", ep.Provider)
}

// newGoogleAI builds langchaingo's Gemini client on the REST transport, so
// the HTTP client (and its status recorder) carries the calls. Given a
// client the Google SDK ignores option.WithAPIKey, so the key travels as
// the header Gemini reads; WithAPIKey is still needed by the context-cache
// client, which the SDK builds without the HTTP client (and ragent never
// calls).
func newGoogleAI(ep Endpoint, model googleai.Option, client *http.Client, now func() time.Time) (*googleai.GoogleAI, error) {
	if ep.APIKey == "" {
		return nil, service.Errorf(service.ErrInvalid, "llm: endpoint %s: googleai needs an API key", ep.Name)
	}
	hc := newCallClient(client, http.Header{"X-Goog-Api-Key": {ep.APIKey}}, now)
	opts := []googleai.Option{googleai.WithRest(), googleai.WithAPIKey(ep.APIKey), googleai.WithHTTPClient(hc), model}
	if ep.BaseURL != "" {
		opts = append(opts, func(o *googleai.Options) {
			o.ClientOptions = append(o.ClientOptions, option.WithEndpoint(strings.TrimRight(ep.BaseURL, "/")))
		})
	}
	return googleai.New(context.Background(), opts...)
}

// newBedrockClient builds the AWS SDK's Bedrock runtime client. The key is
// ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]; without one the SDK's
// default chain (AWS_* variables, shared files, instance roles) applies.
// The SDK does not retry: ragent's retry and failover decide.
func newBedrockClient(ep Endpoint, hc *http.Client) (*bedrockruntime.Client, error) {
	var creds aws.CredentialsProvider
	if ep.APIKey != "" {
		parts := strings.SplitN(ep.APIKey, ":", 3)
		if len(parts) < 2 {
			return nil, service.Errorf(service.ErrInvalid, "llm: endpoint %s: the bedrock key is ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]", ep.Name)
		}
		token := ""
		if len(parts) == 3 {
			token = parts[2]
		}
		creds = credentials.NewStaticCredentialsProvider(parts[0], parts[1], token)
	} else {
		cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(ep.Region))
		if err != nil {
			return nil, service.Errorf(service.ErrInvalid, "llm: endpoint %s: aws credentials: %v", ep.Name, err)
		}
		creds = cfg.Credentials
	}
	opts := bedrockruntime.Options{
		Region:           ep.Region,
		Credentials:      aws.NewCredentialsCache(creds),
		HTTPClient:       hc,
		RetryMaxAttempts: 1,
	}
	if ep.BaseURL != "" {
		opts.BaseEndpoint = aws.String(strings.TrimRight(ep.BaseURL, "/"))
	}
	return bedrockruntime.New(opts), nil
}
