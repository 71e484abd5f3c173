"""Who is asking: API keys, tenants and roles.

``keys`` creates, lists, revokes and verifies API keys (only a hash of each secret is stored);
``principal`` is the verified caller every request carries: its tenant, role and key id. A domain
package; it never imports the HTTP layer.
"""
