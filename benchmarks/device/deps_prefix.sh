# Sourced by the device scripts: unpacks the carried .debs (scripts/fetch_device_debs.sh) into a
# private prefix and exports what CMake and pkg-config need to find them there. The image's own
# copies of libraries it already has (zlib, PCRE2, libseccomp) win over the carried ones, so that
# nothing else on the machine (python3, torch) ever loads a Debian copy by accident.
prefix=/tmp/turnrl-deps
lib="$prefix/usr/lib/x86_64-linux-gnu"
mkdir -p "$lib"
for deb in .deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
# Debian 12's zlib lives in /lib; gather every runtime library in one folder.
[[ -d "$prefix/lib/x86_64-linux-gnu" ]] && cp -a "$prefix/lib/x86_64-linux-gnu/." "$lib/"
# Absolute symbolic links (libz.so -> /lib/...) point into the image: aim them at the prefix's copy.
while IFS= read -r link; do
  target=$(readlink "$link")
  [[ $target == /* && -e "$lib/$(basename "$target")" ]] && ln -sfn "$(basename "$target")" "$link"
done < <(find "$prefix" -type l)
for soname in libz.so.1 libpcre2-8.so.0 libseccomp.so.2; do
  system=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ {print $NF; exit}')
  [[ -n $system ]] || continue
  rm -f "$lib/$soname"*
  ln -sfn "$system" "$lib/${soname%%.so*}.so"
done
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$prefix"
pkg_config="$prefix/usr/bin/pkgconf"
