-- Knowledge-base names are unique among the knowledge bases the one who
-- names them can read, not across the whole database: a manager renaming a
-- knowledge base must not learn, from a conflict, the name of a private one
-- they cannot see (README "Knowledge-base isolation"). Admins read every
-- knowledge base, so what they create or rename stays unique everywhere.
-- The check runs in the service, under an advisory lock of the writing
-- transaction; this index serves it.
DROP INDEX knowledge_bases_name_live;
CREATE INDEX knowledge_bases_name_live ON knowledge_bases (name) WHERE deleted_at IS NULL;
