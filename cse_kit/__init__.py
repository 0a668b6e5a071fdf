"""cse-kit: reproduce, compare and extend contrastive sentence-embedding papers (DiffCSE, SCD, ESimCSE, DiffAug,
with unsupervised SimCSE as the shared baseline)."""

__version__ = "0.1.0"
