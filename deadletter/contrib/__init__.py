"""Optional integrations: each subpackage is an app to add to INSTALLED_APPS when wanted."""
