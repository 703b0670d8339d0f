package web

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service/chat"
)

// TestChatJSHandlesTheStreamEvents checks the event names the chat page
// handles against the ones the chat service emits, both ways: done is read by
// api.js's stream reader, every other event by chat-stream.js's onEvent
// switch.
func TestChatJSHandlesTheStreamEvents(t *testing.T) {
	read := func(name string) string {
		b, err := fs.ReadFile(Assets(), name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	src := read("chat-stream.js")
	start := strings.Index(src, "const onEvent = (name, data) => {")
	end := strings.Index(src[max(start, 0):], "default:")
	if start < 0 || end < 0 {
		t.Fatal("chat-stream.js: the onEvent switch was not found")
	}
	var handled []string
	for _, m := range regexp.MustCompile(`case '([a-z]+)':`).FindAllStringSubmatch(src[start:start+end], -1) {
		handled = append(handled, m[1])
	}
	if !strings.Contains(read("api.js"), "ev.name === '"+chat.EventDone+"'") {
		t.Errorf("api.js does not read the %s event", chat.EventDone)
	}
	handled = append(handled, chat.EventDone)
	for _, name := range chat.EventNames {
		if !slices.Contains(handled, name) {
			t.Errorf("the server emits %q, which chat-stream.js does not handle", name)
		}
	}
	for _, name := range handled {
		if !slices.Contains(chat.EventNames, name) {
			t.Errorf("chat-stream.js handles %q, which the server never emits", name)
		}
	}
}
