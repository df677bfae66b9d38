"""``devtools_testutils.resource_testcase``: the resource group's parameter name."""

RESOURCE_GROUP_PARAM = "resource_group"
