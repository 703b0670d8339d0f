-- Restoring a deleted chunk (docs/curation.md): a deletion removes the
-- chunk's row, so its revision has to remember what the row knew besides
-- its text and state: where it stood in its document (ordinal), its
-- section (the heading path, an OCR'd page's number) and whether it was
-- added by hand. Every revision records them (they do not change while
-- the chunk lives); a restore puts the chunk back at its ordinal when that
-- is still free, after the document's last chunk otherwise. Revisions
-- written before this migration have NULL here: a chunk deleted then is
-- restored after the last chunk, without a section, manual when its first
-- revision created it.
ALTER TABLE chunk_revisions
    ADD COLUMN ordinal integer,
    ADD COLUMN section text,
    ADD COLUMN manual  boolean;
