"""The fault matrix's loads, the effects they must lead to, and the auditor of the output topics."""
