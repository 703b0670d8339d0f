-- keyword_docs lists each indexed chunk's distinct terms, read back only
-- when the chunk is removed. As text[] every term costs a 4-byte header
-- and padding to 4 bytes, a third of the table (17 bytes per posting of 53
-- at 200k chunks, BENCHMARKS.md "Retrieval at scale"); as one string of
-- space-separated terms it costs the term's bytes plus one. A term never
-- holds a space: text.Tokenize splits on spaces, and the store refuses
-- such a term.
ALTER TABLE keyword_docs ALTER COLUMN terms TYPE text USING array_to_string(terms, ' ');
