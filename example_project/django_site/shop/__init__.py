"""The shop: an order, and a confirmation sent a while after it was placed."""
