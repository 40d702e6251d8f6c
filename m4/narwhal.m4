# NARWHAL_PLUGIN: for out-of-tree plugin builds (docs/plugins.md, section 9).
# Sets and substitutes NARWHAL_PLUGIN_CFLAGS, NARWHAL_PLUGIN_LIBS (both
# from the installed narwhal-plugin.pc unless set in the environment),
# NARWHAL_PLUGIN_LDFLAGS and narwhal_plugindir.
#
# It does not call PKG_CHECK_MODULES: that macro would need the prefix
# NARWHAL_PLUGIN, which is this macro's own name, and m4 would expand it
# inside PKG_CHECK_MODULES's messages again and again without end. The
# words below never name this macro on their own.
AC_DEFUN([NARWHAL_PLUGIN],
[AC_REQUIRE([PKG_PROG_PKG_CONFIG])dnl
AC_ARG_VAR([NARWHAL_PLUGIN_CFLAGS], [C compiler flags for Narwhal plugins, overriding pkg-config])dnl
AC_ARG_VAR([NARWHAL_PLUGIN_LIBS], [linker flags for Narwhal plugins, overriding pkg-config])dnl
AC_MSG_CHECKING([for narwhal-plugin])
PKG_CHECK_EXISTS([narwhal-plugin], [AC_MSG_RESULT([yes])],
  [AC_MSG_RESULT([no])
   AC_MSG_ERROR([narwhal-plugin.pc not found: install Narwhal (its make install, or the narwhal-dev package), or add the directory that holds narwhal-plugin.pc (PREFIX/lib/pkgconfig) to PKG_CONFIG_PATH])])
AS_IF([test -z "${NARWHAL_PLUGIN_CFLAGS+set}"],
      [NARWHAL_PLUGIN_CFLAGS=`$PKG_CONFIG --cflags narwhal-plugin`])
AS_IF([test -z "${NARWHAL_PLUGIN_LIBS+set}"],
      [NARWHAL_PLUGIN_LIBS=`$PKG_CONFIG --libs narwhal-plugin`])
narwhal_plugindir=`$PKG_CONFIG --variable=plugindir narwhal-plugin`
AC_SUBST([narwhal_plugindir])
# Automake must also see -module written in Makefile.am itself (it checks
# that a library not named lib*.la is a module); repeating it is harmless.
NARWHAL_PLUGIN_LDFLAGS="-module -avoid-version -shared -export-symbols-regex '^narwhal_plugin_entry\$\$'"
AC_SUBST([NARWHAL_PLUGIN_LDFLAGS])dnl
])
