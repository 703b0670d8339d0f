-- Every token carries its user's token version; bumping it (password change,
-- disable, role change, "log out everywhere") ends every token issued before,
-- on every instance, even after the user is enabled again. Existing tokens
-- carry no version, which reads as 0 and so stays valid until the first bump.
ALTER TABLE users ADD COLUMN token_version bigint NOT NULL DEFAULT 0;
