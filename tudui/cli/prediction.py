"""``python -m tudui predict``: classify image files with a trained checkpoint."""
import warnings

import torch

from .. import checkpoint, data, device
from . import checks
from .console import quiet
from .training import UsageError


def open_image(path):
    """``path`` as an 8-bit RGB image, turned as its EXIF orientation says (phone photos); a UsageError if not."""
    import numpy as np
    from PIL import Image, ImageOps
    checks.regular_file(path, "image", UsageError)
    try:
        with quiet():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
            image.load()
            image = ImageOps.exif_transpose(image)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UsageError(f"{path!r}: refused: more than {Image.MAX_IMAGE_PIXELS:,} pixels "
                         "(a decompression bomb?)") from None
    except Exception as exc:  # only Pillow ran: not an image, truncated, a decoder's RuntimeError ...
        reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"{path!r}: cannot read image: {reason[:120]}") from None
    if image.mode.startswith("I"):  # 16- or 32-bit grey: scale to 8 bits instead of saturating
        image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8))
    return image.convert("RGB")


def predict(args):
    from torchvision import transforms
    dev = device.pick_device(args.device)
    checks.read_checked(args.checkpoint)
    with quiet():
        model = checkpoint.load_model(args.checkpoint, dev)
    to_input = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    for path in args.images:
        image = open_image(path)
        with torch.no_grad():
            probs = model(to_input(image).unsqueeze(0).to(dev)).softmax(1)[0].cpu()
        k = int(probs.argmax())
        print(f"{path}: {data.CLASSES[k]} ({probs[k]:.1%})")
