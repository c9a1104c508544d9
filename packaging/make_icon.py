"""Draw the app icon with QPainter and write assets/icon.png and a multi-size assets/icon.ico.

The generated files are committed; run this again only to change the design:

    python packaging/make_icon.py

Each size is drawn at that size (not scaled down from 256 px) so the small icons stay sharp. The
.ico holds 32-bit BMP entries up to 64 px and a PNG entry at 256 px, the layout Windows Explorer,
PyInstaller's icon embedding and Inno Setup's SetupIconFile all read.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QLinearGradient, QPainter, QPainterPath

ROOT = Path(__file__).resolve().parent.parent
ICO_SIZES = (16, 20, 24, 32, 40, 48, 64, 256)
PNG_IN_ICO_FROM = 256  # entries this big are stored as PNG (BMP would be 256 KiB each)
TOP = QColor("#4F46E5")  # indigo
BOTTOM = QColor("#06B6D4")  # cyan


def render(size: int) -> QImage:
    """The icon at `size` px: a rounded gradient tile with a speech bubble holding a sound wave."""
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = float(size)

    tile = QPainterPath()
    tile.addRoundedRect(QRectF(0, 0, s, s), s * 0.22, s * 0.22)
    gradient = QLinearGradient(QPointF(0, 0), QPointF(0, s))
    gradient.setColorAt(0.0, TOP)
    gradient.setColorAt(1.0, BOTTOM)
    painter.fillPath(tile, gradient)

    bubble = QPainterPath()
    body = QRectF(s * 0.16, s * 0.18, s * 0.68, s * 0.50)
    bubble.addRoundedRect(body, s * 0.14, s * 0.14)
    tail = QPainterPath()
    tail.moveTo(s * 0.30, body.bottom() - s * 0.02)
    tail.lineTo(s * 0.26, s * 0.84)
    tail.lineTo(s * 0.46, body.bottom() - s * 0.02)
    tail.closeSubpath()
    painter.fillPath(bubble.united(tail), QColor("white"))

    # Sound-wave bars; fewer at small sizes so each bar stays at least a pixel wide.
    heights = (0.35, 0.7, 1.0, 0.7, 0.35) if size >= 24 else (0.5, 1.0, 0.5)
    count = len(heights)
    span = body.width() * 0.62
    pitch = span / count
    bar_w = max(1.0, pitch * 0.55)
    left = body.center().x() - span / 2 + (pitch - bar_w) / 2
    for i, h in enumerate(heights):
        bar_h = body.height() * 0.62 * h
        rect = QRectF(left + i * pitch, body.center().y() - bar_h / 2, bar_w, bar_h)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(TOP)
        painter.drawRoundedRect(rect, bar_w / 2, bar_w / 2)
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise RuntimeError("PNG encoding failed")
    buffer.close()
    return bytes(data.data())


def bgra(image: QImage) -> np.ndarray:
    """Pixels as a (h, w, 4) BGRA array (Format_ARGB32 is BGRA in memory on little-endian)."""
    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    h, w = image.height(), image.width()
    raw = np.frombuffer(image.constBits(), dtype=np.uint8, count=image.bytesPerLine() * h)
    return raw.reshape(h, image.bytesPerLine())[:, : w * 4].reshape(h, w, 4).copy()


def bmp_entry(image: QImage) -> bytes:
    """An ICO image entry in BMP form: BITMAPINFOHEADER, bottom-up BGRA pixels, 1-bit AND mask."""
    pixels = bgra(image)
    h, w, _ = pixels.shape
    xor = pixels[::-1].tobytes()  # BMP rows run bottom-up
    transparent = pixels[::-1, :, 3] == 0
    mask_row_bytes = ((w + 31) // 32) * 4
    mask = np.packbits(transparent, axis=1, bitorder="big")
    mask = np.pad(mask, ((0, 0), (0, mask_row_bytes - mask.shape[1])))
    and_mask = mask.astype(np.uint8).tobytes()
    # Height is doubled: the XOR image and the AND mask are stacked, as ICO requires.
    header = struct.pack("<IiiHHIIiiII", 40, w, h * 2, 1, 32, 0, len(xor) + len(and_mask), 0, 0, 0, 0)
    return header + xor + and_mask


def build_ico(images: list[QImage]) -> bytes:
    entries = [png_bytes(img) if img.width() >= PNG_IN_ICO_FROM else bmp_entry(img) for img in images]
    directory = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    for img, data in zip(images, entries, strict=True):
        dim = img.width() if img.width() < 256 else 0  # 0 means 256 in ICONDIRENTRY
        directory += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return directory + b"".join(entries)


def main() -> int:
    assets = ROOT / "assets"
    assets.mkdir(exist_ok=True)
    images = [render(size) for size in ICO_SIZES]
    (assets / "icon.ico").write_bytes(build_ico(images))
    (assets / "icon.png").write_bytes(png_bytes(render(256)))
    print(f"wrote {assets / 'icon.ico'} and {assets / 'icon.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
