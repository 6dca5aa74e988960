"""STL -> PNG views for `render_3d`: trimesh loads the mesh, numpy rasterizes it with a
z-buffer, matplotlib (Agg) composes the picture and writes the PNG.

Why not matplotlib's own `Poly3DCollection`: it sorts whole triangles by their mean depth
(painter's algorithm), which is wrong for CAD meshes with large flat faces; a cube with a
spherical hole is drawn with the hidden hole on top of the cube's front faces. A per-pixel
depth test shows what is really visible. Faces are flat-shaded by a light over the viewer's
shoulder, creases and silhouettes are drawn as dark lines, the picture is rendered at 2x and
averaged down (anti-aliasing). The PNG is exactly `width` x `height` pixels; the view's name
and the model's size are written in a corner so whoever looks at it knows the scale.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import trimesh  # noqa: E402

# name -> (elevation, azimuth) in degrees; OpenSCAD's front looks from -Y towards +Y.
VIEWS = {
    "isometric": (35.264, -45.0),
    "front": (0.0, -90.0),
    "back": (0.0, 90.0),
    "left": (0.0, 180.0),
    "right": (0.0, 0.0),
    "top": (90.0, -90.0),
    "bottom": (-90.0, -90.0),
}
BASE_COLOR = np.array([0.36, 0.56, 0.82])
EDGE_COLOR = np.array([0.10, 0.14, 0.22])
BACKGROUND = np.array([1.0, 1.0, 1.0])
CREASE_COS = np.cos(np.radians(35.0))
SUPERSAMPLE = 2
MARGIN = 0.08
CHUNK_PAIRS = 1 << 20
DPI = 100


def load_mesh(data: bytes) -> trimesh.Trimesh:
    """Parse an STL (binary or ASCII); `ValueError` if it is not one or holds no triangles."""
    try:
        mesh = trimesh.load(io.BytesIO(data), file_type="stl", force="mesh")
    except Exception as exc:  # trimesh raises many kinds on garbage
        raise ValueError(f"not a readable STL file ({type(exc).__name__})") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError("the STL holds no triangles")
    if not np.all(np.isfinite(mesh.vertices)):
        raise ValueError("the STL has non-finite coordinates")
    return mesh


def camera(elev: float, azim: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(right, up, towards-the-viewer) unit vectors of a view."""
    e, a = np.radians(elev), np.radians(azim)
    eye = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    right = np.array([-np.sin(a), np.cos(a), 0.0])
    up = np.cross(eye, right)
    return right, up, eye


def rasterize(screen: np.ndarray, depth: np.ndarray, faces: np.ndarray, width: int,
              height: int, candidates: np.ndarray) -> np.ndarray:
    """Face index visible at each pixel (-1: background). `screen` holds the vertices' pixel
    coordinates (x right, y down), `depth` grows towards the viewer; only the faces listed
    in `candidates` are drawn.

    Each (face, pixel of its bounding box) pair is tested with edge functions; the z-buffer
    keeps, per pixel, the largest `quantized depth << face_bits | face`, so one
    `np.maximum.at` per chunk both tests the depth and remembers the face.
    """
    tri = screen[faces].astype(np.float64)  # (m, 3, 2)
    x0, y0 = tri[:, 0, 0], tri[:, 0, 1]
    x1, y1 = tri[:, 1, 0], tri[:, 1, 1]
    x2, y2 = tri[:, 2, 0], tri[:, 2, 1]
    area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    xmin = np.clip(np.ceil(tri[:, :, 0].min(axis=1) - 0.5), 0, width).astype(np.int64)
    xmax = np.clip(np.floor(tri[:, :, 0].max(axis=1) - 0.5), -1, width - 1).astype(np.int64)
    ymin = np.clip(np.ceil(tri[:, :, 1].min(axis=1) - 0.5), 0, height).astype(np.int64)
    ymax = np.clip(np.floor(tri[:, :, 1].max(axis=1) - 0.5), -1, height - 1).astype(np.int64)
    bw, bh = xmax - xmin + 1, ymax - ymin + 1
    live = candidates[(np.abs(area[candidates]) > 1e-12) & (bw[candidates] > 0)
                      & (bh[candidates] > 0)]
    face_bits = max(1, int(len(faces)).bit_length())
    depth_scale = float((1 << (62 - face_bits)) - 1)
    lo, span = float(depth.min()), max(float(np.ptp(depth)), 1e-12)
    z = (depth[faces] - lo) / span  # (m, 3) in [0, 1]
    zbuf = np.full(width * height, -1, dtype=np.int64)
    counts = (bw * bh)[live]
    start = 0
    while start < len(live):
        total = np.cumsum(counts[start:])
        stop = start + max(1, int(np.searchsorted(total, CHUNK_PAIRS, side="right")))
        ids, n = live[start:stop], counts[start:stop]
        face = np.repeat(ids, n)
        off = np.arange(len(face), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        px = xmin[face] + off % bw[face]
        py = ymin[face] + off // bw[face]
        cx, cy = px + 0.5, py + 0.5
        a = area[face]
        w0 = ((x1[face] - cx) * (y2[face] - cy) - (x2[face] - cx) * (y1[face] - cy)) / a
        w1 = ((x2[face] - cx) * (y0[face] - cy) - (x0[face] - cx) * (y2[face] - cy)) / a
        w2 = 1.0 - w0 - w1
        inside = (w0 >= -1e-9) & (w1 >= -1e-9) & (w2 >= -1e-9)
        face = face[inside]
        d = w0[inside] * z[face, 0] + w1[inside] * z[face, 1] + w2[inside] * z[face, 2]
        key = (np.clip(d, 0.0, 1.0) * depth_scale).astype(np.int64) << face_bits | face
        np.maximum.at(zbuf, py[inside] * width + px[inside], key)
        start = stop
    fbuf = np.where(zbuf >= 0, zbuf & ((1 << face_bits) - 1), -1)
    return fbuf.reshape(height, width)


def shade(normals: np.ndarray, right: np.ndarray, up: np.ndarray, eye: np.ndarray) -> np.ndarray:
    light = 0.55 * eye + 0.45 * up - 0.35 * right
    light /= np.linalg.norm(light)
    lambert = np.abs(normals @ light)  # two-sided: open meshes show their inside too
    facing = normals @ eye
    intensity = 0.32 + 0.68 * lambert
    colors = BASE_COLOR[None, :] * intensity[:, None] + 0.10 * lambert[:, None] ** 12
    colors[facing < 0] *= 0.75  # a back face is visible only through a hole in the mesh
    return np.clip(colors, 0.0, 1.0)


def edges(fbuf: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """Pixels on a silhouette or a crease (neighbouring faces bent by more than 35 degrees)."""
    mask = np.zeros(fbuf.shape, dtype=bool)
    for a, b, out in ((fbuf[:-1, :], fbuf[1:, :], mask[:-1, :]),
                      (fbuf[:, :-1], fbuf[:, 1:], mask[:, :-1])):
        differ = a != b
        both = differ & (a >= 0) & (b >= 0)
        bent = differ & ~both  # silhouette: mesh next to background
        ia, ib = a[both], b[both]
        bent[both] = (normals[ia] * normals[ib]).sum(axis=1) < CREASE_COS
        out |= bent
    return mask


def picture(mesh: trimesh.Trimesh, view: str, width: int, height: int) -> np.ndarray:
    """An RGB float image (height, width, 3) of `mesh` seen from `view`."""
    right, up, eye = camera(*VIEWS[view])
    verts = np.asarray(mesh.vertices, dtype=np.float64)
    normals = np.asarray(mesh.face_normals, dtype=np.float64)
    candidates = np.arange(len(mesh.faces))
    if mesh.is_watertight and mesh.is_winding_consistent:
        if mesh.volume < 0:  # inside out: the normals point in
            normals = -normals
        candidates = np.nonzero(normals @ eye > 0)[0]  # a closed mesh hides its back faces
    sx, sy, depth = verts @ right, verts @ up, verts @ eye
    big_w, big_h = width * SUPERSAMPLE, height * SUPERSAMPLE
    span = max(float(np.ptp(sx)), float(np.ptp(sy)), 1e-9)
    scale = (1.0 - 2.0 * MARGIN) * min(big_w, big_h) / span
    cx, cy = (sx.min() + sx.max()) / 2.0, (sy.min() + sy.max()) / 2.0
    screen = np.stack([(sx - cx) * scale + big_w / 2.0, big_h / 2.0 - (sy - cy) * scale], 1)
    fbuf = rasterize(screen, depth, np.asarray(mesh.faces), big_w, big_h, candidates)
    colors = shade(normals, right, up, eye)
    image = np.where(fbuf[..., None] >= 0, colors[np.maximum(fbuf, 0)], BACKGROUND)
    image[edges(fbuf, normals)] = EDGE_COLOR
    return image.reshape(height, SUPERSAMPLE, width, SUPERSAMPLE, 3).mean(axis=(1, 3))


def _size_label(mesh: trimesh.Trimesh) -> str:
    size = mesh.bounds[1] - mesh.bounds[0]
    return " x ".join(f"{v:.4g}" for v in size)


def render_view(mesh: trimesh.Trimesh, view: str, path: str, width: int, height: int) -> None:
    image = picture(mesh, view, width, height)
    fig = plt.figure(figsize=(width / DPI, height / DPI), dpi=DPI, facecolor="white")
    try:
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.imshow(image, interpolation="nearest", aspect="auto")
        ax.set_axis_off()
        fig.text(0.015, 0.015, f"{view}  |  size {_size_label(mesh)}", fontsize=10,
                 color="#333333")
        fig.savefig(path, dpi=DPI, format="png", facecolor="white")
    finally:
        plt.close(fig)
