package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A manager who is not an admin shares a private knowledge base with a
// group as viewers from the knowledge-base page; a member of that group
// then finds it in the chat's knowledge-base filter, and a non-member does
// not (they see only the internal one).
func TestBrowserKnowledgeBaseSharing(t *testing.T) {
	_, api, b := startBrowser(t, testConfig(t), "mia", "gus", "nat")
	public := api.createKB("public-faq")
	api.makeInternal(public)
	private := api.createKB("team-handbook")
	if r := api.do("POST", "/api/v1/knowledge-bases/"+private+"/members", map[string]string{"kind": "user", "name": "mia", "role": "manager"}); r.Status != http.StatusCreated {
		t.Fatalf("make mia manager: %d %s", r.Status, r.Body)
	}

	step := steps(t)
	option := func(kb string) string { return fmt.Sprintf(`[data-testid=kb-filter-option][data-kb-id=%q]`, kb) }

	step("admin creates a group with gus in it", func(t *testing.T) {
		adm := b.signedIn(t, "admin", false)
		adm.click(t, `[data-testid=nav-groups]`)
		adm.sendKeys(t, `#group-name`, "support")
		adm.click(t, `[data-testid=group-submit]`)
		row := `[data-testid=group-row][data-name=support]`
		adm.click(t, row+` [data-testid=group-members]`)
		adm.visible(t, `[data-testid=group-members-dialog]`)
		adm.sendKeys(t, `#group-member-username`, "gus")
		adm.click(t, `[data-testid=group-member-submit]`)
		adm.visible(t, `[data-testid=group-member-row][data-username=gus]`)
		adm.screenshot(t, "group-members")
		adm.click(t, `[data-testid=modal-close]`)
		adm.click(t, `[data-testid=logout-button]`)
		adm.visible(t, `[data-testid=login-form]`)
	})

	step("manager adds the group as viewers", func(t *testing.T) {
		mia := b.signedIn(t, "mia", true)
		mia.click(t, `[data-testid=nav-kb]`)
		row := fmt.Sprintf(`[data-testid=kb-row][data-kb-id=%q]`, private)
		mia.visible(t, row+` [data-testid=kb-members]`)
		if n := mia.count(t, fmt.Sprintf(`[data-testid=kb-row][data-kb-id=%q] [data-testid=kb-members]`, public)); n != 0 {
			t.Fatalf("a reader of the internal knowledge base is offered its members")
		}
		mia.click(t, row+` [data-testid=kb-members]`)
		mia.visible(t, `[data-testid=members-dialog]`)
		mia.eval(t, `document.querySelector('#member-kind').value = 'group'`)
		mia.sendKeys(t, `#member-name`, "support")
		mia.eval(t, `document.querySelector('#member-role').value = 'viewer'`)
		mia.click(t, `[data-testid=member-submit]`)
		mia.visible(t, `[data-testid=member-row][data-kind=group][data-name=support][data-role=viewer]`)
		mia.screenshot(t, "kb-members")
	})

	step("group member sees it in chat", func(t *testing.T) {
		gus := b.signedIn(t, "gus", true)
		gus.click(t, `[data-testid=kb-filter] summary`)
		gus.visible(t, option(private))
		gus.visible(t, option(public))
		if n := gus.count(t, `[data-testid=nav-kb]`); n != 0 {
			t.Fatalf("a viewer is offered the knowledge-base pages")
		}
		gus.screenshot(t, "kb-filter-member")
	})

	step("non-member does not", func(t *testing.T) {
		nat := b.signedIn(t, "nat", true)
		nat.click(t, `[data-testid=kb-filter] summary`)
		nat.visible(t, option(public)) // the list has loaded
		if n := nat.count(t, option(private)); n != 0 {
			t.Fatalf("a non-member sees the private knowledge base in chat")
		}
	})

	step("manager removes the group's grant", func(t *testing.T) {
		mia := b.signedIn(t, "mia", true)
		mia.click(t, `[data-testid=nav-kb]`)
		mia.click(t, fmt.Sprintf(`[data-testid=kb-row][data-kb-id=%q] [data-testid=kb-members]`, private))
		grant := `[data-testid=member-row][data-kind=group][data-name=support]`
		mia.click(t, grant+` [data-testid=member-remove]`)
		mia.poll(t, "the grant gone", stepTimeout, fmt.Sprintf(`document.querySelectorAll(%s).length === 0`, quoteJS(grant)))
		mia.visible(t, `[data-testid=member-row][data-kind=user][data-name=mia]`) // the list was loaded again
		if r := api.do("GET", "/api/v1/knowledge-bases/"+private+"/members", nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "support") {
			t.Fatalf("members after the removal: %d %s", r.Status, r.Body)
		}
	})

	step("admin removes gus from the group; the count follows", func(t *testing.T) {
		adm := b.signedIn(t, "admin", true)
		adm.click(t, `[data-testid=nav-groups]`)
		row := `[data-testid=group-row][data-name=support]`
		adm.waitText(t, row+` td.num`, "1")
		adm.click(t, row+` [data-testid=group-members]`)
		member := `[data-testid=group-member-row][data-username=gus]`
		adm.click(t, member+` button`)
		adm.poll(t, "gus gone", stepTimeout, fmt.Sprintf(`document.querySelectorAll(%s).length === 0`, quoteJS(member)))
		adm.click(t, `[data-testid=modal-close]`)
		adm.waitText(t, row+` td.num`, "0")
	})
}
