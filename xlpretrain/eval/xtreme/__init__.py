"""The XTREME benchmark (google-research/xtreme): scoring predictions as its evaluate.py does."""
