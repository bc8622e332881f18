"""Terminal task bundles in Harbor layout, pools, bundled mini pool."""
