-- A document says whether its current generation's text was read from
-- images by OCR (a scanned PDF's pages, an image file): ingestion sets it
-- with the chunks it writes (repository.swapChunks), so a text document
-- whose heading happens to end in "(OCR)" is not taken for a scan.
ALTER TABLE documents ADD COLUMN ocr boolean NOT NULL DEFAULT false;

-- Documents ingested before the column: a chunk of the current generation
-- whose section ends in the label the chunker gives an OCR'd page
-- ("Page 3 (OCR)", possibly after headings).
UPDATE documents d SET ocr = true
WHERE EXISTS (
    SELECT 1 FROM chunks c
    WHERE c.document_id = d.id AND c.generation = d.generation
      AND c.section ~ '(^| > )Page [0-9]+ \(OCR\)$'
);
