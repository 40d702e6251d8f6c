# NARWHAL_PLUGIN: for out-of-tree plugin builds.
# Sets NARWHAL_PLUGIN_CFLAGS, NARWHAL_PLUGIN_LIBS, NARWHAL_PLUGIN_LDFLAGS and
# narwhal_plugindir from the installed narwhal-plugin.pc.
AC_DEFUN([NARWHAL_PLUGIN], [
  PKG_CHECK_MODULES([NARWHAL_PLUGIN], [narwhal-plugin])
  narwhal_plugindir=`$PKG_CONFIG --variable=plugindir narwhal-plugin`
  AC_SUBST([narwhal_plugindir])
  NARWHAL_PLUGIN_LDFLAGS="-module -avoid-version -shared -export-symbols-regex '^narwhal_plugin_entry\$\$'"
  AC_SUBST([NARWHAL_PLUGIN_LDFLAGS])
])
