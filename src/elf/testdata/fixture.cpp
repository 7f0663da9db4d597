// Test fixture for src/elf: C++ names (namespaces, templates, const methods, operators) and
// calls into libstdc++ through the PLT.
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace outer {
namespace inner {
struct Widget {
    int v;
    __attribute__((noinline)) int get() const { return v; }
    __attribute__((noinline)) Widget operator+(const Widget &o) const { return Widget{v + o.v}; }
    __attribute__((noinline)) bool operator<(const Widget &o) const { return v < o.v; }
    template <typename T> __attribute__((noinline)) T as() const { return T(v); }
};
} // namespace inner
} // namespace outer

__attribute__((noinline)) int use(std::vector<int> &v, std::map<std::string, int> &m)
{
    outer::inner::Widget a{1}, b{2};
    auto c = a + b;
    m["x"] = c.get() + static_cast<int>(c.as<long>());
    return v.at(3) + (a < b);
}

int main()
{
    std::vector<int> v{1, 2, 3, 4};
    std::map<std::string, int> m;
    std::cout << use(v, m) << std::endl;
    try {
        v.at(100);
    } catch (const std::out_of_range &e) {
        std::cerr << e.what() << std::endl;
    }
    auto *p = new int(3);
    delete p;
    return 0;
}
