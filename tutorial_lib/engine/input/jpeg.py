"""What a JPEG file's header says, read without decoding: size, colour components, coding process.

The GPU pipeline reads it in the DataLoader workers to decide, per file, before anything is decoded:
over the pixel limit (skip, as the CPU pipeline does), a form nvJPEG cannot decode (4 components:
CMYK, or YCCK as Adobe's APP14 marker calls the transformed form; lossless, arithmetic-coded or
12-bit JPEGs) for the CPU decoder, and how many bytes it will take decoded (the device budget).
:func:`marker_problem` checks the rest of the marker structure (tables, scans, the markers inside the
compressed data), so that a damaged file goes to the CPU decoder rather than failing a batched device
decode of many files.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

SOI = b"\xff\xd8"
# Start-of-frame markers (every one but DHT C4, JPG C8, DAC CC); C0 baseline, C1 extended, C2 progressive
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_DEVICE_SOF = {0xC0, 0xC1, 0xC2}  # Huffman-coded 8-bit baseline/extended/progressive: what nvJPEG decodes
_NO_LENGTH = {0x01, *range(0xD0, 0xD9)}  # TEM, RSTn, SOI: markers without a length field
# after 0xFF inside compressed data: a stuffed zero, a fill byte, a restart marker
_IN_SCAN = np.zeros(256, dtype=bool)
_IN_SCAN[[0x00, 0xFF, *range(0xD0, 0xD8)]] = True
_AFTER_SCAN = {0xC4, 0xDA, 0xDB, 0xDD, 0xFE, *range(0xE0, 0xF0)}  # DHT, SOS, DQT, DRI, COM, APPn (progressive files)
EOI = 0xD9


@dataclass(frozen=True)
class JpegHeader:
    """A JPEG's frame header: size, components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK), precision, SOF
    marker, and the Adobe APP14 colour transform if present (0: none/CMYK, 1: YCbCr, 2: YCCK)."""

    width: int
    height: int
    components: int
    precision: int
    sof: int
    adobe_transform: int | None = None

    @property
    def device_decodable(self) -> bool:
        """True for what nvJPEG (and torchvision's batched decode) takes: 1 or 3 components, 8-bit, Huffman."""
        return self.components in (1, 3) and self.precision == 8 and self.sof in _DEVICE_SOF

    @property
    def rgb_bytes(self) -> int:
        """Bytes of the image decoded to RGB uint8."""
        return 3 * self.width * self.height


def is_complete_jpeg(data: bytes) -> bool:
    """True for bytes that start with a JPEG marker and end with its end-of-image marker."""
    return data[:3] == b"\xff\xd8\xff" and data.rstrip(b"\x00\r\n ")[-2:] == b"\xff\xd9"


def read_header(data: bytes) -> JpegHeader | None:
    """The frame header of JPEG bytes, or None if the markers before the first scan hold none
    (not a JPEG, or a damaged one)."""
    if data[:2] != SOI:
        return None
    position, adobe = 2, None
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _NO_LENGTH:
            position += 2
            continue
        length, = struct.unpack_from(">H", data, position + 2)
        body = data[position + 4:position + 2 + length]
        if length < 2 or len(body) < length - 2:
            return None
        if marker == 0xEE and body[:5] == b"Adobe" and len(body) >= 12:
            adobe = body[11]
        elif marker in _SOF and len(body) >= 6:
            precision, height, width, components = struct.unpack_from(">BHHB", body)
            return JpegHeader(width, height, components, precision, marker, adobe)
        elif marker == 0xDA:  # start of scan before any frame header
            return None
        position += 2 + length
    return None


def marker_problem(data: bytes) -> str | None:
    """What is wrong with the marker structure of complete JPEG bytes, or None if nothing is seen.

    Checked (vectorised over the compressed data, tens of microseconds for an ImageNet file): quantisation
    and Huffman tables before the first scan, a scan, and after it only markers a decoder expects there
    (restart markers, further tables and scans, EOI at the end). A marker of any other kind inside the
    compressed data is damage that libjpeg reports as "Corrupt JPEG data"; nvJPEG's reaction to it was not
    measured (no GPU here), so such a file is kept out of the batched device decode, where one refusal fails
    the whole call. Damage that leaves the markers intact (flipped bits in the compressed data) is not seen.
    """
    seen, position = set(), 2
    while True:  # the segments before the first scan
        while position < len(data) and data[position] == 0xFF and data[position + 1:position + 2] == b"\xff":
            position += 1  # fill bytes
        if position + 4 > len(data) or data[position] != 0xFF or data[position + 1] == EOI:
            return "no scan before the end of the file"
        marker = data[position + 1]
        if marker in _NO_LENGTH:
            position += 2
            continue
        length, = struct.unpack_from(">H", data, position + 2)
        seen.add(marker)
        position += 2 + length
        if marker == 0xDA:
            break
    if 0xDB not in seen or (0xC4 not in seen and seen & {0xC0, 0xC1, 0xC2}):
        return "no quantisation or Huffman table before the first scan"
    body = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero(body[position:-1] == 0xFF) + position
    markers = at[~_IN_SCAN[body[at + 1]]]  # 0xFF followed by a marker code
    skip_to = 0
    for where in markers.tolist():
        if where < skip_to:
            continue  # inside a table or scan header segment: its bytes are data
        code = data[where + 1]
        if code == EOI:
            return None if not data[where + 2:].strip(b"\x00\r\n ") else "data after the end-of-image marker"
        if code not in _AFTER_SCAN or where + 4 > len(data):
            return f"unexpected marker 0x{code:02X} inside the compressed data"
        skip_to = where + 2 + struct.unpack_from(">H", data, where + 2)[0]
    return "no end-of-image marker after the scans"
