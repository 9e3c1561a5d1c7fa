"""Wire-format messages as other teams' producers send them, and Hypothesis strategies of them."""
