"""The operators' console: rows by slice and state, a row's story, audited actions.

``layout`` is the HTML shell every console page shares (header, navigation, cells);
``forms`` renders the action buttons a row's detail page offers.
"""
