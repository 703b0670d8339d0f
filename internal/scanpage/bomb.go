package scanpage

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// PNGClaiming is a PNG whose header claims w×h 8-bit gray pixels, with a
// tiny body: what a decompression bomb looks like up to the point where a
// decoder would allocate. The tests of OCR's size checks upload it.
func PNGClaiming(w, h uint32) []byte {
	var buf bytes.Buffer
	buf.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&buf, binary.BigEndian, uint32(len(data)))
		c := append([]byte(typ), data...)
		buf.Write(c)
		_ = binary.Write(&buf, binary.BigEndian, crc32.ChecksumIEEE(c))
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 0 // 8-bit grayscale
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	chunk("IEND", nil)
	return buf.Bytes()
}
