package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// adminListActions works the admin lists' row actions no other step of
// TestBrowserUI reaches, on the signed-in admin's tab: a user is created,
// promoted, disabled, given a new password and deleted; a group renamed and
// deleted; a knowledge base edited in the form; a term mapping disabled and
// deleted; a document reindexed and deleted. Each change is checked on the
// server, not only on the page.
func adminListActions(t *testing.T, tb *tab, in *instance, api *client) {
	if r := api.do("POST", "/api/v1/groups", map[string]string{"name": "night-shift"}); r.Status != http.StatusCreated {
		t.Fatalf("create group: %d %s", r.Status, r.Body)
	}
	if r := api.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "k8s", "targetTerm": "kubernetes", "enabled": true}); r.Status != http.StatusCreated {
		t.Fatalf("create term mapping: %d %s", r.Status, r.Body)
	}
	kb := api.createKB("runbooks")
	doc := api.uploadAccepted(kb, "restart.md", []byte("# Restart\n\nRestart the service with systemctl restart ragent.\n"))
	api.waitReady(doc.ID)

	// user answers lena's record on the server, or nil once she is gone.
	user := func(t *testing.T) map[string]any {
		r := api.do("GET", "/api/v1/users", nil)
		var page struct{ Items []map[string]any }
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("list users: %d %s", r.Status, r.Body)
		}
		for _, u := range page.Items {
			if u["username"] == "lena" {
				return u
			}
		}
		return nil
	}
	lena := `[data-testid=user-row][data-username=lena]`
	// saved waits for the info toast with a message of a change made after
	// clearToasts. The message, not only the kind: the toast of an earlier
	// action can land after clearToasts, because the list it reloads can show
	// the server's new state before the browser has read the action's answer.
	clearToasts := func(t *testing.T) { tb.eval(t, `document.getElementById('toasts').replaceChildren()`) }
	// The page may be in either language: messages are given in both.
	saved := func(t *testing.T, messages ...string) {
		var css []string
		for _, m := range messages {
			css = append(css, fmt.Sprintf(`[data-testid=toast][data-kind=info][data-message=%q]`, m))
		}
		tb.visible(t, strings.Join(css, ", "))
	}

	t.Run("users", func(t *testing.T) {
		if r := api.do("POST", "/api/v1/users", map[string]string{"username": "mia", "password": "mia-password", "role": "user"}); r.Status != http.StatusCreated {
			t.Fatalf("create user mia: %d %s", r.Status, r.Body)
		}
		mia := `[data-testid=user-row][data-username=mia]`
		tb.open(t, "/#/admin/users")
		tb.visible(t, mia)

		// Two reloads of the list overlap: mia's role change reloads it and
		// that answer (read before lena existed) is held until creating lena
		// has reloaded it again. The older answer, arriving last, must not
		// take lena off the page.
		tb.eval(t, holdNextList("/api/v1/users"))
		tb.eval(t, fmt.Sprintf(`(() => { const s = document.querySelector(%s); s.value = 'admin'; s.dispatchEvent(new Event('change')); })()`,
			quoteJS(mia+` [data-testid=user-role-select]`)))
		tb.poll(t, "mia's reload to be held", stepTimeout, `typeof window.releaseList === 'function'`)
		tb.sendKeys(t, `#user-username`, "lena")
		tb.sendKeys(t, `#user-password`, "lena-password")
		tb.click(t, `[data-testid=user-submit]`)
		tb.visible(t, lena)
		tb.eval(t, `window.releaseList()`)
		tb.poll(t, "every reload answered", stepTimeout, fmt.Sprintf(`document.querySelector(%s).closest('tbody').getAttribute('aria-busy') === 'false'`, quoteJS(mia)))
		if n := tb.count(t, lena); n != 1 {
			t.Fatalf("lena's row after the older reload answered: %d rows, want 1", n)
		}

		clearToasts(t)
		tb.eval(t, fmt.Sprintf(`(() => { const s = document.querySelector(%s); s.value = 'admin'; s.dispatchEvent(new Event('change')); })()`,
			quoteJS(lena+` [data-testid=user-role-select]`)))
		saved(t, "Saved", "已保存")
		if u := user(t); u["role"] != "admin" {
			t.Fatalf("after the role change: %v", u)
		}

		tb.click(t, lena+` [data-testid=user-disable]`)
		tb.visible(t, lena+`.row-disabled`)
		if u := user(t); u["disabled"] != true {
			t.Fatalf("after disabling: %v", u)
		}
		tb.click(t, lena+` [data-testid=user-disable]`)
		tb.poll(t, "the row to be enabled", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(lena+`.row-disabled`)))

		clearToasts(t)
		tb.click(t, lena+` [data-testid=user-password-reset]`)
		tb.sendKeys(t, `[data-testid=prompt-input]`, "lena-new-password")
		tb.click(t, `[data-testid=prompt-ok]`)
		saved(t, "Password changed", "密码已修改")
		in.login(t, "lena", "lena-new-password")

		tb.click(t, lena+` [data-testid=user-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(lena)))
		if u := user(t); u != nil {
			t.Fatalf("deleted user still listed: %v", u)
		}
	})

	t.Run("groups", func(t *testing.T) {
		tb.open(t, "/#/admin/groups")
		// The create form is named by its title.
		if name := tb.evalString(t, `(f => f.getAttribute('aria-label') === f.querySelector('h2').textContent ? f.getAttribute('aria-label') : '')(document.querySelector('[data-testid=group-form]'))`); name == "" {
			t.Error("the group form's accessible name is not its title")
		}
		tb.click(t, `[data-testid=group-row][data-name=night-shift] [data-testid=group-rename]`)
		tb.fill(t, `[data-testid=prompt-input]`, "day-shift")
		tb.click(t, `[data-testid=prompt-ok]`)
		tb.visible(t, `[data-testid=group-row][data-name=day-shift]`)
		tb.click(t, `[data-testid=group-row][data-name=day-shift] [data-testid=group-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, `!document.querySelector('[data-testid=group-row][data-name=day-shift]')`)
		if r := api.do("GET", "/api/v1/groups", nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "shift") {
			t.Fatalf("groups after the delete: %d %s", r.Status, r.Body)
		}
	})

	t.Run("knowledge bases", func(t *testing.T) {
		r := api.do("POST", "/api/v1/knowledge-bases", map[string]any{
			"name": "playbooks", "description": "on-call steps", "chunkSize": 600, "chunkOverlap": 40, "visibility": "internal"})
		if r.Status != http.StatusCreated {
			t.Fatalf("create knowledge base: %d %s", r.Status, r.Body)
		}
		var created struct{ ID string }
		r.json(t, &created)
		tb.open(t, "/#/admin/kb")
		row := `[data-testid=kb-row][data-name=playbooks]`
		tb.click(t, row+` [data-testid=kb-edit]`)
		// Edit loads the knowledge base into the form; Save sends all of it.
		form := tb.evalString(t, `JSON.stringify(['#kb-name', '#kb-description', '#kb-chunk-size', '#kb-chunk-overlap', '#kb-visibility'].map((s) => document.querySelector(s).value))`)
		if want := `["playbooks","on-call steps","600","40","internal"]`; form != want {
			t.Fatalf("the form after Edit holds %s, want %s", form, want)
		}
		if n := tb.count(t, `[data-testid=kb-cancel]:not([hidden])`); n != 1 {
			t.Fatalf("%d cancel buttons shown while editing, want 1", n)
		}
		tb.fill(t, `#kb-description`, "on-call steps and escalation")
		tb.click(t, `[data-testid=kb-submit]`)
		tb.waitText(t, row, "on-call steps and escalation")
		tb.poll(t, "the form to empty", stepTimeout, `document.querySelector('#kb-name').value === '' && document.querySelector('[data-testid=kb-cancel]').hidden`)
		var kb struct {
			Name, Description, Visibility string
			ChunkSize, ChunkOverlap       int
		}
		api.do("GET", "/api/v1/knowledge-bases/"+created.ID, nil).json(t, &kb)
		if kb.Name != "playbooks" || kb.Description != "on-call steps and escalation" || kb.ChunkSize != 600 || kb.ChunkOverlap != 40 || kb.Visibility != "internal" {
			t.Fatalf("stored knowledge base after the edit: %+v", kb)
		}
	})

	t.Run("term mappings", func(t *testing.T) {
		tb.open(t, "/#/admin/terms")
		row := `[data-testid=term-row][data-source=k8s]`
		tb.click(t, row+` [data-testid=term-toggle]`)
		tb.visible(t, row+`.row-disabled`)
		tb.click(t, row+` [data-testid=term-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(row)))
		if r := api.do("GET", "/api/v1/admin/term-mappings", nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "k8s") {
			t.Fatalf("term mappings after the delete: %d %s", r.Status, r.Body)
		}
	})

	t.Run("documents", func(t *testing.T) {
		tb.open(t, "/#/admin/docs/"+kb)
		row := fmt.Sprintf(`[data-testid=doc-row][data-doc-id=%q]`, doc.ID)
		// The list re-renders while it polls a document's status, which can
		// swap a row between finding a button and clicking it: press the
		// buttons in one step of the page instead.
		press := func(t *testing.T, css string) {
			tb.eval(t, fmt.Sprintf(`document.querySelector(%s).click()`, quoteJS(css)))
		}
		tb.visible(t, row+`[data-status=ready]`)
		clearToasts(t)
		press(t, row+` [data-testid=doc-reindex]`)
		saved(t, "Reindexing “restart.md”", "已开始重建“restart.md”的索引")
		api.waitReady(doc.ID)
		tb.visible(t, row+`[data-status=ready]`) // the list followed the reindex
		press(t, row+` [data-testid=doc-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(row)))
		if r := api.do("GET", "/api/v1/documents/"+doc.ID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("deleted document: %d %s", r.Status, r.Body)
		}
	})
}

// holdNextList is a script for a page: the answer to its next GET of path
// is held back from the page until window.releaseList() is called.
func holdNextList(path string) string {
	return fmt.Sprintf(`(() => {
  const real = window.fetch;
  window.fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input), location.href);
    const res = await real(input, init);
    if ((init?.method ?? 'GET') === 'GET' && url.pathname === %s && window.fetch !== real) {
      window.fetch = real; // only this one
      await new Promise((resolve) => { window.releaseList = resolve; });
    }
    return res;
  };
})()`, quoteJS(path))
}
