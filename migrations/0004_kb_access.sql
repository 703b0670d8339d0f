-- Knowledge-base access control (README "Access model").
-- Existing knowledge bases stay readable by every logged-in user, as before
-- the upgrade ('internal'); new ones are members-only ('private') unless the
-- creator says otherwise.
ALTER TABLE knowledge_bases ADD COLUMN visibility text NOT NULL DEFAULT 'internal'
    CHECK (visibility IN ('private', 'internal'));
ALTER TABLE knowledge_bases ALTER COLUMN visibility SET DEFAULT 'private';

-- Groups are admin-managed sets of users; a user may be in many.
CREATE TABLE groups (
    id          bigint PRIMARY KEY,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX groups_name ON groups (lower(name));

CREATE TABLE group_members (
    group_id   bigint NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    user_id    bigint NOT NULL REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

-- A grant of a role on one knowledge base to a user or a group. member_id
-- points at users or groups by member_kind, so it has no foreign key: the
-- code deletes a group's grants with the group.
CREATE TABLE kb_members (
    id          bigint PRIMARY KEY,
    kb_id       bigint NOT NULL REFERENCES knowledge_bases (id),
    member_kind text NOT NULL CHECK (member_kind IN ('user', 'group')),
    member_id   bigint NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'editor', 'manager')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kb_id, member_kind, member_id)
);
CREATE INDEX kb_members_member ON kb_members (member_kind, member_id);
