-- Keep keyword blocks whole in the table's own pages, payloads lz4-compressed
-- there (about 1 kB for a full block of 2 kB), instead of out of line in the
-- TOAST table: fetching a block then costs one index probe and one heap page,
-- not a second index probe and page in the TOAST table too. At a million
-- chunks a query's 150 block fetches went from 2.5 to 1.7 ms, and the
-- table from 954 to 625 MB (BENCHMARKS.md, "Where a 1M query's time goes,
-- and three changes").
-- The head is MAIN too: with toast_tuple_target at 256 bytes, an EXTENDED
-- head would be the column moved out of line once the payload may not be.
-- MAIN still moves a value out of line when a row would not fit in a page,
-- which a block never makes it.
ALTER TABLE keyword_blocks ALTER COLUMN payload SET STORAGE MAIN, ALTER COLUMN head SET STORAGE MAIN;
-- SET STORAGE changes only how new values are stored: rewrite the existing
-- ones (concatenating makes a fresh value; an unchanged one would keep its
-- TOAST pointer). 13 s for 450,000 blocks (a million chunks) here; the old
-- row versions' space is reused by later writes (VACUUM FULL keyword_blocks
-- returns it).
UPDATE keyword_blocks SET payload = payload || ''::bytea, head = head || ''::bytea;
