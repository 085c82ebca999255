#include "chat_page.h"

namespace kt_server {

// Defined in the generated chat_page_assets.cpp.
extern const std::string_view kPageHtml, kPageJs, kPageCss;

const PageAsset *find_page_asset(const std::string &path) {
    static const PageAsset assets[] = {
        {"/", "text/html; charset=utf-8", kPageHtml},
        {"/chat.js", "text/javascript; charset=utf-8", kPageJs},
        {"/chat.css", "text/css; charset=utf-8", kPageCss},
    };
    for (const PageAsset &a : assets)
        if (path == a.path) return &a;
    return nullptr;
}

}  // namespace kt_server
