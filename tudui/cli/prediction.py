"""``python -m tudui predict``: classify image files with a trained checkpoint."""
import warnings

import torch

from .. import checkpoint, data, device
from ..text import one_line, say
from .console import UsageError, quiet

# Opened by content, whatever the name says, and nothing else: an EPS file named dog.jpg would start Ghostscript.
FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF")
LARGEST = 1024  # pixels on the longer side kept before converting: the network sees 32x32


def open_image(path):
    """``path`` as an 8-bit RGB image, turned as its EXIF orientation says (phone photos); a UsageError if not.
    A big picture is made small first (a JPEG decoded at 1/2 to 1/8 scale, then box-averaged), so a 16-bit
    PNG of 89 million pixels takes the memory of its pixels once, not ten times."""
    import numpy as np
    from PIL import Image, ImageOps, UnidentifiedImageError
    checkpoint.regular_file(path, "image", UsageError)
    try:
        with quiet():  # warnings ignored, also under PYTHONWARNINGS=error, except the bomb's
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path, formats=FORMATS)
            image.draft("RGB", (LARGEST, LARGEST))
            image.load()
            if max(image.size) > LARGEST:
                scale = LARGEST / max(image.size)
                image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                                     Image.Resampling.BOX)
            image = ImageOps.exif_transpose(image)
            if image.mode.startswith("I"):  # 16- or 32-bit grey: scale to 8 bits instead of saturating
                image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8))
            return image.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UsageError(say("predict.bomb", path=path, limit=Image.MAX_IMAGE_PIXELS)) from None
    except UnidentifiedImageError:
        raise UsageError(say("predict.not_an_image", path=path)) from None
    except Exception as exc:  # only Pillow ran: truncated, a decoder's RuntimeError ...
        reason = getattr(exc, "strerror", None) or one_line(exc, 120)
        raise UsageError(say("predict.unreadable", path=path, reason=reason)) from None


def predict(args):
    from torchvision import transforms
    dev = device.pick_device(args.device)
    with quiet():
        model = checkpoint.load_model(args.checkpoint, dev)
    to_input = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    for path in args.images:
        image = open_image(path)
        with torch.no_grad():
            probs = model(to_input(image).unsqueeze(0).to(dev)).softmax(1)[0].cpu()
        k = int(probs.argmax())
        print(say("predict.line", path=path, label=say("data.classes").split(",")[k], share=f"{probs[k]:.1%}"))
